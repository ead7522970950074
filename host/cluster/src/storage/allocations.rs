//! The cluster IPs and node ports services hold, and the next free one, as a real API server's
//! allocators hand them out when a service is created without one.
//!
//! The store keeps one [`Allocations`] beside its objects and updates it whenever it stores or
//! removes a service, so it is exact after a restore too. Addresses come from the default
//! service range `10.96.0.0/12` and node ports from `30000-32767`, each in order from where the
//! last one was taken, skipping what is held.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use serde_json::Value;

/// The first address of the service range, `10.96.0.0`.
const SERVICE_RANGE_START: u32 = u32::from_be_bytes([10, 96, 0, 0]);
/// Addresses in the `/12` range.
const SERVICE_RANGE_SIZE: u32 = 1 << 20;
/// The first ten addresses are left to the cluster's own services (`kubernetes`, DNS).
const FIRST_HANDED_OUT: u32 = 11;
const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// Which cluster IPs and node ports are held.
#[derive(Debug, Default)]
pub struct Allocations {
    ips: BTreeSet<u32>,
    ports: BTreeSet<u16>,
    next_ip: u32,
    next_port: u16,
}

/// The addresses a service's spec names (`clusterIP` and `clusterIPs`), as numbers; `None` and
/// other non-addresses are skipped.
fn cluster_ips(spec: &Value) -> impl Iterator<Item = u32> + '_ {
    let single = spec.get("clusterIP").into_iter();
    let listed = spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    single
        .chain(listed)
        .filter_map(Value::as_str)
        .filter_map(|ip| ip.parse::<Ipv4Addr>().ok())
        .map(u32::from)
}

fn node_ports(spec: &Value) -> impl Iterator<Item = u16> + '_ {
    spec.get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter_map(|n| u16::try_from(n).ok())
}

impl Allocations {
    /// Records what the stored service `svc` holds.
    pub fn hold(&mut self, svc: &Value) {
        let spec = svc.get("spec").unwrap_or(&Value::Null);
        self.ips.extend(cluster_ips(spec));
        self.ports.extend(node_ports(spec));
    }

    /// Frees what the removed (or replaced) service `svc` held.
    pub fn release(&mut self, svc: &Value) {
        let spec = svc.get("spec").unwrap_or(&Value::Null);
        for ip in cluster_ips(spec) {
            self.ips.remove(&ip);
        }
        for port in node_ports(spec) {
            self.ports.remove(&port);
        }
    }

    /// Whether a new service asking for this address or port would take one already held.
    pub fn taken(&self, spec: &Value) -> Option<String> {
        if let Some(ip) = cluster_ips(spec).find(|ip| self.ips.contains(ip)) {
            return Some(format!(
                "spec.clusterIPs: Invalid value: [\"{}\"]: failed to allocate IP {}: provided IP is already allocated",
                Ipv4Addr::from(ip),
                Ipv4Addr::from(ip)
            ));
        }
        node_ports(spec).find(|p| self.ports.contains(p)).map(|p| {
            format!(
                "spec.ports[0].nodePort: Invalid value: {p}: provided port is already allocated"
            )
        })
    }

    /// A free cluster IP, taken; `None` when the range is full.
    pub fn take_cluster_ip(&mut self) -> Option<Ipv4Addr> {
        let usable = SERVICE_RANGE_SIZE - FIRST_HANDED_OUT - 1;
        for step in 0..usable {
            let offset = FIRST_HANDED_OUT + (self.next_ip + step) % usable;
            let ip = SERVICE_RANGE_START + offset;
            if self.ips.insert(ip) {
                self.next_ip = (self.next_ip + step + 1) % usable;
                return Some(Ipv4Addr::from(ip));
            }
        }
        None
    }

    /// A free node port, taken; `None` when all are held.
    pub fn take_node_port(&mut self) -> Option<u16> {
        let size = NODE_PORTS.end() - NODE_PORTS.start() + 1;
        for step in 0..size {
            let port = NODE_PORTS.start() + (self.next_port + step) % size;
            if self.ports.insert(port) {
                self.next_port = (self.next_port + step + 1) % size;
                return Some(port);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn addresses_and_ports_are_handed_out_once() {
        let mut a = Allocations::default();
        let first = a.take_cluster_ip().unwrap();
        assert_eq!(first, Ipv4Addr::new(10, 96, 0, 11));
        // An address a service names itself is held too, and skipped.
        a.hold(&json!({"spec": {"clusterIP": "10.96.0.12", "clusterIPs": ["10.96.0.12"]}}));
        assert_eq!(a.take_cluster_ip().unwrap(), Ipv4Addr::new(10, 96, 0, 13));
        assert!(a.taken(&json!({"clusterIP": "10.96.0.12"})).is_some());
        assert!(a.taken(&json!({"clusterIP": "None"})).is_none());
        a.release(&json!({"spec": {"clusterIP": "10.96.0.12"}}));
        assert!(a.taken(&json!({"clusterIP": "10.96.0.12"})).is_none());

        assert_eq!(a.take_node_port(), Some(30000));
        a.hold(&json!({"spec": {"ports": [{"nodePort": 30001}]}}));
        assert_eq!(a.take_node_port(), Some(30002));
        assert!(a.taken(&json!({"ports": [{"nodePort": 30001}]})).is_some());
    }

    #[test]
    fn a_full_range_hands_out_nothing() {
        let mut a = Allocations::default();
        for _ in NODE_PORTS {
            assert!(a.take_node_port().is_some());
        }
        assert_eq!(a.take_node_port(), None);
        a.release(&json!({"spec": {"ports": [{"nodePort": 31000}]}}));
        assert_eq!(a.take_node_port(), Some(31000));
    }
}
