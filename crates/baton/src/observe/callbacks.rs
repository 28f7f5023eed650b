//! Per-node callbacks: stacked, in registration order, each fired exactly once per run, a
//! panic in one caught and logged.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use crate::report::NodeReport;

type OnValue = Box<dyn Fn(&(dyn Any + Send + Sync)) + Send + Sync>;
type OnReport = Box<dyn Fn(&NodeReport<'_>) + Send + Sync>;

/// The callbacks of one node.
#[derive(Default)]
pub(crate) struct NodeCallbacks {
    success: Vec<OnValue>,
    failure: Vec<OnReport>,
    complete: Vec<OnReport>,
}

impl NodeCallbacks {
    pub(crate) fn on_success<T: Send + Sync + 'static>(
        &mut self,
        f: impl Fn(&T) + Send + Sync + 'static,
    ) {
        self.success.push(Box::new(move |v| {
            if let Some(v) = v.downcast_ref::<T>() {
                f(v);
            }
        }));
    }

    pub(crate) fn on_failure(&mut self, f: impl Fn(&NodeReport<'_>) + Send + Sync + 'static) {
        self.failure.push(Box::new(f));
    }

    pub(crate) fn on_complete(&mut self, f: impl Fn(&NodeReport<'_>) + Send + Sync + 'static) {
        self.complete.push(Box::new(f));
    }

    /// Fires the callbacks for `node`, which has just ended; `value` is its value, if any.
    pub(crate) fn fire(&self, node: &NodeReport<'_>, value: Option<&(dyn Any + Send + Sync)>) {
        let name = node.name();
        match value {
            Some(v) => {
                for f in &self.success {
                    guarded(name, "on_success", || f(v));
                }
            }
            None if matches!(
                node.outcome(),
                crate::report::Outcome::Failed | crate::report::Outcome::Skipped
            ) =>
            {
                for f in &self.failure {
                    guarded(name, "on_failure", || f(node));
                }
            }
            None => {}
        }
        for f in &self.complete {
            guarded(name, "on_complete", || f(node));
        }
    }
}

fn guarded(node: &str, which: &str, f: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
        let message = crate::error::panic_message(panic.as_ref());
        tracing::error!(node, callback = which, %message, "node callback panicked; ignored");
    }
}
