//! Connections per client: one address (an IPv6 /64) may hold at most
//! [`PER_CLIENT`] of a listener's connections, so that a client opening
//! thousands (each sending half a request, say) cannot take every slot:
//! health checks and other clients still get in. A `--trusted-proxy`,
//! which carries many clients, is not held to it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use ipnet::IpNet;

/// Connections one client may hold at once: an eighth of the listener's.
pub(crate) const PER_CLIENT: usize = 512;

/// The connections each client holds.
#[derive(Debug, Default)]
pub(crate) struct Conns {
    by_client: Mutex<HashMap<IpAddr, usize>>,
    /// Proxies, held to no limit of their own.
    proxies: Arc<[IpNet]>,
}

/// One client's connection, counted until dropped.
#[derive(Debug)]
pub(crate) struct Conn {
    conns: Arc<Conns>,
    /// None for a proxy's connection, which is not counted.
    client: Option<IpAddr>,
}

impl Conns {
    pub(crate) fn trusting(proxies: &[IpNet]) -> Arc<Self> {
        Arc::new(Conns {
            by_client: Mutex::default(),
            proxies: proxies.into(),
        })
    }

    /// A new connection from `addr`; None when its client holds
    /// [`PER_CLIENT`] already.
    pub(crate) fn admit(self: &Arc<Self>, addr: IpAddr) -> Option<Conn> {
        if crate::console::trusted(&self.proxies, addr) {
            return Some(Conn {
                conns: self.clone(),
                client: None,
            });
        }
        let client = crate::console::client_key(addr);
        let mut by = self.by_client.lock().expect("the connections' lock");
        let held = by.entry(client).or_default();
        if *held >= PER_CLIENT {
            return None;
        }
        *held += 1;
        Some(Conn {
            conns: self.clone(),
            client: Some(client),
        })
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(client) = self.client else {
            return;
        };
        let mut by = self.conns.by_client.lock().expect("the connections' lock");
        if let Some(held) = by.get_mut(&client) {
            *held -= 1;
            if *held == 0 {
                by.remove(&client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_holds_at_most_its_share() {
        let conns = Conns::trusting(&["10.9.0.0/16".parse().unwrap()]);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let held: Vec<Conn> = (0..PER_CLIENT).map(|_| conns.admit(a).unwrap()).collect();
        assert!(conns.admit(a).is_none(), "one past the share");
        assert!(conns.admit("10.0.0.2".parse().unwrap()).is_some());
        let proxy: IpAddr = "10.9.1.1".parse().unwrap();
        let through: Vec<Conn> = (0..=PER_CLIENT)
            .map(|_| conns.admit(proxy).unwrap())
            .collect();
        drop(held);
        assert!(conns.admit(a).is_some(), "given back when closed");
        assert!(conns.by_client.lock().unwrap().is_empty());
        drop(through);
    }
}
