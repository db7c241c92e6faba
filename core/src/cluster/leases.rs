//! Which daemon a node name belongs to, and whether launches may go to it:
//! each gnoded start has an instance id; another daemon cannot take a name
//! whose holder's lease is live, and a node a launch could not reach gets
//! no launches until it is heard from.

use super::{Cluster, ClusterError};
use crate::wire::NodeRegistration;

impl Cluster {
    /// Whether `reg` may register: a name is taken over by another gnoded
    /// (another instance id) only once the holder's lease has run out
    /// (`holder_alive`: heard from within the node timeout).
    pub fn check_registration(
        &self,
        reg: &NodeRegistration,
        holder_alive: bool,
    ) -> Result<(), ClusterError> {
        match self.nodes.get(&reg.name) {
            Some(n)
                if n.up
                    && holder_alive
                    && !n.instance_id.is_empty()
                    && !reg.instance_id.is_empty()
                    && n.instance_id != reg.instance_id =>
            {
                Err(ClusterError::NameTaken {
                    name: reg.name.clone(),
                    holder: n.instance_id.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Whether a heartbeat from `instance_id` is from the registered
    /// daemon of `node` (an empty id: a node that predates instance ids).
    pub fn is_registered_instance(&self, node: &str, instance_id: &str) -> bool {
        self.nodes.get(node).is_some_and(|n| {
            n.up && (instance_id.is_empty()
                || n.instance_id.is_empty()
                || n.instance_id == instance_id)
        })
    }

    /// The node was heard from (a heartbeat): launches may go there again.
    /// Returns whether that changed anything.
    pub fn node_heard(&mut self, name: &str) -> bool {
        self.nodes
            .get_mut(name)
            .is_some_and(|n| std::mem::replace(&mut n.unconfirmed, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::testkit::registration;

    fn reg(instance: &str) -> NodeRegistration {
        NodeRegistration {
            instance_id: instance.into(),
            url: format!("http://{instance}"),
            ..registration("n1", &[], vec![])
        }
    }

    #[test]
    fn a_live_nodes_name_is_not_taken_by_another_daemon() {
        let mut c = Cluster::new(Box::new(crate::launch::CaseLaunch));
        c.check_registration(&reg("a"), false).unwrap();
        c.register_node(&reg("a"), 0);
        // The same daemon again (it restarted its link): fine.
        c.check_registration(&reg("a"), true).unwrap();
        let e = c.check_registration(&reg("b"), true).unwrap_err();
        assert!(e.to_string().contains("--name"), "{e}");
        assert!(c.is_registered_instance("n1", "a"));
        assert!(
            !c.is_registered_instance("n1", "b"),
            "the impostor's heartbeats"
        );
        // Once the holder's lease has run out, a new daemon may take over.
        c.check_registration(&reg("b"), false).unwrap();
        c.register_node(&reg("b"), 1);
        assert_eq!(c.node("n1").unwrap().url, "http://b");
        assert!(!c.is_registered_instance("n1", "a"));
        // A node that predates instance ids is taken at its word.
        assert!(c.is_registered_instance("n1", ""));
    }
}
