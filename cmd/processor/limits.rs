//! `limits`: per-tenant flow control (max in flight, rate, weight),
//! read by every processor within a heartbeat.

use clap::{Args, Subcommand};
use feed::ids::Tenant;
use feed::limits::Rate;
use feed::store::limits::Limit;

use super::{DbArgs, connect, create};
use crate::status::table;

#[derive(Args)]
pub struct LimitsArgs {
    #[command(subcommand)]
    pub command: LimitsCommand,
}

#[derive(Subcommand)]
pub enum LimitsCommand {
    /// Set a tenant's limits; flags not given keep their value.
    Set(SetArgs),
    /// List every tenant's limits.
    List(ListArgs),
    /// Remove a tenant's limits: it is limited by nothing but the processors' flags.
    Clear(ClearArgs),
}

#[derive(Args)]
pub struct SetArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The tenant, as partitions name it (`enqueue --tenant`)
    #[arg(long)]
    pub tenant: Tenant,
    /// Items of the tenant at the handler at once, across every processor (0 = no cap)
    #[arg(long)]
    pub max_in_flight: Option<u32>,
    /// Items of the tenant sent per second across every processor, e.g. 100/s or 30/m ("none" =
    /// no rate)
    #[arg(long)]
    pub rate: Option<RateArg>,
    /// Items the rate may send at once after a quiet spell [default: 100 ms of the rate, at least two batches]
    #[arg(long)]
    pub burst: Option<u32>,
    /// The tenant's share of dispatch against other tenants (1 = even; 2 = twice as many turns)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub weight: Option<u32>,
}

/// A listing's arguments (limits and producer tokens alike).
#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Print JSON lines instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ClearArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// The tenant whose limits to remove
    #[arg(long)]
    pub tenant: Tenant,
}

/// A rate, or `none`.
#[derive(Clone, Copy)]
pub struct RateArg(Option<Rate>);

impl std::str::FromStr for RateArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "none" {
            return Ok(RateArg(None));
        }
        s.parse().map(|r| RateArg(Some(r)))
    }
}

pub async fn limits(a: LimitsArgs) -> anyhow::Result<()> {
    match a.command {
        LimitsCommand::Set(a) => set(a).await,
        LimitsCommand::List(a) => list(a).await,
        LimitsCommand::Clear(a) => clear(a).await,
    }
}

async fn set(a: SetArgs) -> anyhow::Result<()> {
    let store = create(&a.db).await?;
    let mut limit = store
        .limits()
        .await?
        .into_iter()
        .find(|l| l.tenant == a.tenant)
        .unwrap_or_else(|| Limit {
            tenant: a.tenant.clone(),
            ..Limit::default()
        });
    if let Some(m) = a.max_in_flight {
        limit.max_in_flight = (m > 0).then_some(m);
    }
    if let Some(r) = a.rate {
        limit.rate = r.0.map(|r| r.0);
    }
    if let Some(b) = a.burst {
        limit.burst = Some(b);
    }
    if let Some(w) = a.weight {
        limit.weight = Some(w);
    }
    store.set_limit(&limit).await?;
    println!("{}", describe(&limit));
    Ok(())
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    let limits = store.limits().await?;
    if a.json {
        return crate::status::json_lines(&limits);
    }
    let mut t = table(["tenant", "max in flight", "rate", "burst", "weight"]);
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for l in &limits {
        t.add_row([
            l.tenant.to_string(),
            or_dash(l.max_in_flight.map(|m| m.to_string())),
            or_dash(l.rate.map(|r| Rate(r).to_string())),
            or_dash(l.burst.map(|b| b.to_string())),
            l.weight.unwrap_or(1).to_string(),
        ]);
    }
    println!("{t}");
    Ok(())
}

async fn clear(a: ClearArgs) -> anyhow::Result<()> {
    let store = connect(&a.db).await?;
    if store.clear_limit(&a.tenant).await? {
        println!("tenant {}: limits removed", a.tenant);
    } else {
        println!("tenant {}: had no limits", a.tenant);
    }
    Ok(())
}

/// One line saying what a tenant's limits are now.
fn describe(l: &Limit) -> String {
    let mut parts = Vec::new();
    if let Some(m) = l.max_in_flight {
        parts.push(format!("max in flight {m}"));
    }
    if let Some(r) = l.rate {
        parts.push(format!("rate {}", Rate(r)));
    }
    if let Some(b) = l.burst {
        parts.push(format!("burst {b}"));
    }
    parts.push(format!("weight {}", l.weight.unwrap_or(1)));
    format!("tenant {}: {}", l.tenant, parts.join(", "))
}
