//! The wire types of the stand-in services: what each endpoint takes and answers, as JSON.

use serde::{Deserialize, Serialize};

/// An order placement request: the run input of the order graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRequest {
    /// Who orders.
    pub user_id: u64,
    /// What they order.
    pub sku_id: u64,
}

/// What `GET /user/{id}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// The user's id.
    pub id: u64,
    /// Display name.
    pub name: String,
    /// Membership level.
    pub level: String,
}

/// What `GET /sku/{id}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sku {
    /// The sku's id.
    pub id: u64,
    /// Product title.
    pub title: String,
    /// Unit price in cents.
    pub price_cents: u64,
}

/// The body of `POST /stock/deduct`: the user and the sku to reserve for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeductStock {
    /// Who the unit is reserved for.
    pub user: User,
    /// What is reserved.
    pub sku: Sku,
}

/// [`DeductStock`] borrowed: serializes to the same JSON, so a caller holding the user and
/// the sku behind references (as a graph's node holds its upstreams' values) sends them
/// without cloning.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct DeductStockRef<'a> {
    pub(crate) user: &'a User,
    pub(crate) sku: &'a Sku,
}

/// What `POST /stock/deduct` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stock {
    /// Who the unit is reserved for.
    pub user_id: u64,
    /// The sku.
    pub sku_id: u64,
    /// Units in stock; one of them is now reserved for the user. `0`: out of stock,
    /// nothing reserved.
    pub quantity: u64,
}

/// The body of `POST /ship` and `POST /shortage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchRequest {
    /// Who ordered.
    pub user_id: u64,
    /// What.
    pub sku_id: u64,
    /// The stock quantity the decision was made on.
    pub quantity: u64,
}

/// What `POST /ship` and `POST /shortage` answer: how the order is dispatched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// Who ordered.
    pub user_id: u64,
    /// What.
    pub sku_id: u64,
    /// `shipped` or `backordered`.
    pub status: String,
    /// The tracking number (shipped) or the shortage ticket (backordered).
    pub reference: String,
}

/// What `POST /notify` answers (its body is a [`Dispatch`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notification {
    /// Who was notified.
    pub user_id: u64,
    /// What they were told.
    pub message: String,
}

/// The body of `POST /mail`, `/sms` and `/push`: the borrow notification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// The borrow this notice is about (the request number in the example).
    pub borrow_id: u64,
    /// Who borrowed.
    pub user_id: u64,
    /// The book.
    pub isbn: String,
}

/// What a notification channel answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// `mail`, `sms` or `push`.
    pub channel: String,
    /// The borrow it was about.
    pub borrow_id: u64,
    /// The channel's id for the sent message.
    pub message_id: String,
}
