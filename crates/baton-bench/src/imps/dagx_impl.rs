//! dagx 0.3, used as its README shows: a `#[task]` struct per node kind, `add_task`,
//! `depends_on` with a tuple of handles (up to 8), `run(|fut| { tokio::spawn(fut); })`.
//!
//! A `DagRunner` takes its tasks out when it runs, so it runs once: every run builds one.

use dagx::{DagRunner, Task, TaskHandle, task};

use crate::probe::Probe;
use crate::shapes::Dag;

pub(crate) type Prepared = (DagRunner, usize);

macro_rules! dagx_node {
    ($name:ident $(, $arg:ident)*) => {
        struct $name {
            id: u32,
            probe: Probe,
        }

        #[task]
        impl $name {
            async fn run(&self $(, $arg: &u32)*) -> u32 {
                $( let _ = $arg; )*
                self.probe.step(self.id).await;
                self.id
            }
        }
    };
}

dagx_node!(D0);
dagx_node!(D1, a);
dagx_node!(D2, a, b);
dagx_node!(D3, a, b, c);
dagx_node!(D4, a, b, c, d);
dagx_node!(D5, a, b, c, d, e);

/// Builds `dag` as a dagx runner (in-degree at most 5).
pub(crate) fn build(dag: &Dag, probe: &Probe) -> Prepared {
    let runner = DagRunner::new();
    let mut hs: Vec<TaskHandle<u32>> = Vec::with_capacity(dag.len());
    for i in 0..dag.len() {
        let id = i as u32;
        let p = probe.clone();
        let h = |k: u32| &hs[k as usize];
        let handle: TaskHandle<u32> = match *dag.ups(i) {
            [] => runner.add_task(D0 { id, probe: p }).into(),
            [a] => runner.add_task(D1 { id, probe: p }).depends_on(h(a)),
            [a, b] => runner
                .add_task(D2 { id, probe: p })
                .depends_on((h(a), h(b))),
            [a, b, c] => runner
                .add_task(D3 { id, probe: p })
                .depends_on((h(a), h(b), h(c))),
            [a, b, c, d] => {
                runner
                    .add_task(D4 { id, probe: p })
                    .depends_on((h(a), h(b), h(c), h(d)))
            }
            [a, b, c, d, e] => {
                runner
                    .add_task(D5 { id, probe: p })
                    .depends_on((h(a), h(b), h(c), h(d), h(e)))
            }
            ref more => panic!(
                "dagx bench supports in-degree <= 5, node {i} has {}",
                more.len()
            ),
        };
        hs.push(handle);
    }
    (runner, dag.len())
}

/// Runs the runner (once) on tokio.
pub(crate) async fn run(prepared: &Prepared) -> Result<(), String> {
    prepared
        .0
        .run(|fut| {
            tokio::spawn(fut);
        })
        .await
        .map_err(|e| format!("dagx run failed: {e}"))
}
