//! White-box tests of the scheduler, next to the code they pin. The run state's own tests,
//! `engine/run/state/state_tests.rs`, are a module of `engine/run/state.rs`.

mod common;
mod embedded;
mod fast_path;
mod ready_queue;
mod ready_queue_turns;
mod shared_timer;
mod task_storage;
