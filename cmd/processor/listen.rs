//! Where `run` and `ui` listen and who may act there: the listener's
//! address and host names, trusted proxies, and the admin and producer
//! tokens.

use clap::Args;
use feed::Config;
use feed::config::ListenConfig;

secret_flags!(
    AdminTokenArgs { admin_token, admin_token_file, env = "FEED_ADMIN_TOKEN", what = "admin token" },
    "Allows actions in the dashboard and the API (at least 16 characters); without it they are read-only [default: none]"
);

impl AdminTokenArgs {
    /// The checked token, if one was given.
    pub fn token(&self) -> anyhow::Result<Option<feed::console::AdminToken>> {
        Ok(self
            .value()
            .map(feed::console::AdminToken::new)
            .transpose()?)
    }
}

secret_flags!(
    ProducerTokenArgs { producer_token, producer_token_file, env = "FEED_PRODUCER_TOKEN", what = "producer token" },
    "Deprecated: allows enqueueing over the API (POST /api/v1/partitions/{id}/items) into partitions of no tenant, without weight or max_in_flight, and nothing else (at least 16 characters); give producers scoped tokens instead (processor tokens create) [default: none]"
);

impl ProducerTokenArgs {
    /// The checked token, if one was given.
    pub fn token(&self) -> anyhow::Result<Option<feed::console::ProducerToken>> {
        Ok(self
            .value()
            .map(|t| feed::console::ProducerToken::for_flag("--producer-token", t))
            .transpose()?)
    }
}

/// `--trusted-proxy`, for the console of `run --ui` and `ui`.
#[derive(Args)]
pub struct TrustedProxyArgs {
    /// A reverse proxy (address or network, e.g. 10.0.0.7 or 10.0.0.0/8) whose
    /// X-Forwarded-For names the client, so that wrong tokens count against that client and
    /// not against everyone behind the proxy; repeatable (FEED_TRUSTED_PROXY takes several,
    /// comma-separated) [default: none: X-Forwarded-For is ignored]
    #[arg(
        long = "trusted-proxy",
        env = "FEED_TRUSTED_PROXY",
        value_delimiter = ',',
        value_parser = feed::console::parse_proxy
    )]
    pub proxies: Vec<ipnet::IpNet>,
}

/// Where to listen for health, metrics and the console, and who may act
/// there: `run` and `ui` share these flags.
#[derive(Args)]
#[command(next_help_heading = "Listener and console")]
pub struct ListenArgs {
    /// Address of the health, metrics and console listener (loopback by default; say
    /// 0.0.0.0:8080 to serve every interface); with run, 'off' serves nothing
    #[arg(long, env = "FEED_LISTEN", default_value = Config::LISTEN)]
    pub listen: String,
    /// A host name the console (--ui) answers besides IP addresses and localhost, repeatable
    /// (FEED_ALLOWED_HOST takes several, comma-separated) [default: none]
    #[arg(
        long = "allowed-host",
        env = "FEED_ALLOWED_HOST",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    #[command(flatten)]
    pub trusted_proxies: TrustedProxyArgs,
    #[command(flatten)]
    pub token: AdminTokenArgs,
    #[command(flatten)]
    pub producer_token: ProducerTokenArgs,
}

impl ListenArgs {
    /// The listener of `run`, serving the console when `ui`.
    pub fn config(self, ui: bool) -> anyhow::Result<ListenConfig> {
        let mut l = ListenConfig::default();
        l.address = (self.listen != "off").then_some(self.listen);
        l.ui = ui;
        l.admin_token = self.token.token()?;
        l.producer_token = self.producer_token.token()?;
        l.allowed_hosts = self.allowed_hosts;
        l.trusted_proxies = self.trusted_proxies.proxies;
        Ok(l)
    }
}
