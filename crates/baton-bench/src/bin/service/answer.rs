//! The front service's answer to `GET /order/{user}/{sku}`, the same for every build.

use baton_stand_in::Dispatch;
use serde::{Deserialize, Serialize};

/// The front service's answer: the order as the flow placed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OrderResult {
    /// The stock quantity the flow decided on (`0` when the stock fallback answered).
    pub(crate) quantity: u64,
    /// `shipped` or `backordered`.
    pub(crate) status: String,
    /// The tracking number or the shortage ticket.
    pub(crate) reference: String,
    /// What the user was told (the in-app fallback when notify failed).
    pub(crate) message: String,
}

impl OrderResult {
    /// The answer from the flow's last two values.
    pub(crate) fn new(quantity: u64, dispatch: &Dispatch, message: String) -> Self {
        OrderResult {
            quantity,
            status: dispatch.status.clone(),
            reference: dispatch.reference.clone(),
            message,
        }
    }
}
