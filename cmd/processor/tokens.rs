//! `tokens`: producer tokens for the enqueue API, each bound to a tenant
//! (and optionally an id prefix and caps), stored only as a hash.

use clap::{Args, Subcommand};
use feed::store::ProducerScope;

use super::limits::ListArgs;
use super::{DbArgs, connect};
use crate::status::{clean, table};

#[derive(Args)]
pub struct TokensArgs {
    #[command(subcommand)]
    pub command: TokensCommand,
}

#[derive(Subcommand)]
pub enum TokensCommand {
    /// Create a producer token bound to a tenant; the token is printed once.
    Create(CreateArgs),
    /// List the producer tokens' ids and scopes (never the tokens).
    List(ListArgs),
    /// Revoke a producer token by its id: it stops working at once.
    Revoke(RevokeArgs),
}

#[derive(Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The tenant: partitions the token creates belong to it, and it may add only to its partitions
    #[arg(long)]
    pub tenant: String,
    /// Partition ids and given item ids must start with this (generated item ids get it too), and no
    /// other tenant's token may create or give ids that start with it; refused when it overlaps
    /// (one starts with the other) another tenant's token's prefix
    #[arg(long)]
    pub prefix: Option<String>,
    /// The highest weight the token may give a partition [default: none; the default weight]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_weight: Option<u32>,
    /// The highest max_in_flight the token may give a partition, and the one a partition it creates
    /// gets when the producer gives none [default: none]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: Option<u32>,
}

#[derive(Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The token's id, as `tokens list` shows it (pt-…)
    pub id: String,
}

pub async fn tokens(a: TokensArgs) -> anyhow::Result<()> {
    match a.command {
        TokensCommand::Create(a) => create(a).await,
        TokensCommand::List(a) => list(a).await,
        TokensCommand::Revoke(a) => revoke(a).await,
    }
}

async fn create(a: CreateArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let mut scope = ProducerScope::new(a.tenant)?;
    scope.prefix = a.prefix;
    scope.max_weight = a.max_weight;
    scope.max_in_flight = a.max_in_flight;
    let (scope, token) = store.create_producer_token(&scope).await?;
    eprintln!(
        "producer token {} for tenant {} created; it is shown only now:",
        scope.id,
        clean(&scope.tenant)
    );
    println!("{token}");
    Ok(())
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let tokens = store.producer_tokens().await?;
    if a.json {
        return crate::status::json_lines(&tokens);
    }
    let mut t = table([
        "id",
        "tenant",
        "prefix",
        "max weight",
        "max in flight",
        "created",
    ]);
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for s in &tokens {
        let created = chrono::DateTime::from_timestamp_millis(s.created_at)
            .map_or_else(|| s.created_at.to_string(), |d| d.to_rfc3339());
        t.add_row([
            s.id.clone(),
            clean(&s.tenant),
            or_dash(s.prefix.as_deref().map(clean)),
            or_dash(s.max_weight.map(|m| m.to_string())),
            or_dash(s.max_in_flight.map(|m| m.to_string())),
            created,
        ]);
    }
    println!("{t}");
    Ok(())
}

async fn revoke(a: RevokeArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    if !store.revoke_producer_token(&a.id).await? {
        anyhow::bail!("no producer token has the id {}", clean(&a.id));
    }
    println!("producer token {} revoked", clean(&a.id));
    Ok(())
}
