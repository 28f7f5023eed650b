//! The wire types of the stand-in services and of the front service's answer.

use serde::{Deserialize, Serialize};

/// An order: who orders what (the front's `GET /order/{user}/{sku}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OrderRequest {
    pub(crate) user_id: u64,
    pub(crate) sku_id: u64,
}

/// What `GET /user/{id}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct User {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) level: String,
}

/// What `GET /sku/{id}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sku {
    pub(crate) id: u64,
    pub(crate) title: String,
    pub(crate) price_cents: u64,
}

/// The body of `POST /stock/deduct`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeductStock {
    pub(crate) user: User,
    pub(crate) sku: Sku,
}

/// What `POST /stock/deduct` answers: units in stock (`0`: out of stock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Stock {
    pub(crate) user_id: u64,
    pub(crate) sku_id: u64,
    pub(crate) quantity: u64,
}

/// The body of `POST /ship` and `POST /shortage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DispatchRequest {
    pub(crate) user_id: u64,
    pub(crate) sku_id: u64,
    pub(crate) quantity: u64,
}

/// What `POST /ship` and `POST /shortage` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Dispatch {
    pub(crate) user_id: u64,
    pub(crate) sku_id: u64,
    /// `shipped` or `backordered`.
    pub(crate) status: String,
    /// The tracking number or the shortage ticket.
    pub(crate) reference: String,
}

/// What `POST /notify` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Notification {
    pub(crate) user_id: u64,
    pub(crate) message: String,
}

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
