//! NCCL on the simulator: every collective, every element type, in place and out of place,
//! on 2 and 3 simulated devices of one `Device::sim_group`, against sums computed here.

use crate::common::nccl::*;
use crate::each_type;

#[test]
fn all_reduce_matches_the_cpu_for_every_type_and_op() {
    each_type!(all_reduce_case, &mut ranks(2), 7);
    each_type!(all_reduce_case, &mut ranks(3), 5);
}

#[test]
fn broadcast_and_reduce_match_the_cpu_from_every_root() {
    each_type!(rooted_case, &mut ranks(2), 5);
    each_type!(rooted_case, &mut ranks(3), 4);
}

#[test]
fn all_gather_and_reduce_scatter_match_the_cpu() {
    each_type!(gather_scatter_case, &mut ranks(2), 3);
    each_type!(gather_scatter_case, &mut ranks(3), 5);
}

#[test]
fn send_recv_and_all_to_all_match_the_cpu() {
    each_type!(p2p_case, &mut ranks(2), 4);
    each_type!(p2p_case, &mut ranks(3), 3);
}
