//! The names of the pods and services a TFJob owns, which `TF_CONFIG` lists as host names and
//! the objects are created under: one function both sides read, so they cannot disagree.

use tfjob_api::ReplicaType;

/// `<job>-<lowercase type>-<index>`, with every `/` of the job name replaced by `-`.
pub fn object_name(job_name: &str, rtype: ReplicaType, index: i32) -> String {
    format!("{job_name}-{}-{index}", rtype.lower()).replace('/', "-")
}
