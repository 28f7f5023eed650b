//! The situations the example posts an order in, and the answers it prints: all services
//! healthy (200), stock down (200 with the fallback's 0 units, after the retries), user
//! down (502 naming `user`), user slower than the run's 2 s budget (504 naming `user`),
//! then a body that is not an order (axum's rejection).

use std::time::Duration;

use baton_examples::{Behavior, Downstreams, OrderRequest, Service};
use baton_graph::BoxError;

/// A situation: its name and how the downstreams behave in it.
type Case = (&'static str, fn(&Downstreams));

const CASES: [Case; 4] = [
    ("healthy", |_| {}),
    ("stock down", |d| d.update(Service::Stock, Behavior::fail)),
    ("user down", |d| d.update(Service::User, Behavior::fail)),
    ("user slower than the budget", |d| {
        d.update(Service::User, |b| b.slow_by(Duration::from_millis(2_500)));
    }),
];

/// Posts an order to `url` in each situation, then a body that is not an order, and
/// prints each answer's status and body.
///
/// # Errors
/// When the order service cannot be reached or its answer cannot be read.
pub(crate) async fn post_each(downstreams: &Downstreams, url: &str) -> Result<(), BoxError> {
    let client = reqwest::Client::new();
    let order = OrderRequest {
        user_id: 7,
        sku_id: 42,
    };
    for (name, set_up) in CASES {
        downstreams.reset();
        set_up(downstreams);
        let response = client.post(url).json(&order).send().await?;
        let status = response.status();
        println!("{name:<28} {status}  {}", response.text().await?);
    }
    downstreams.reset();
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .body("{\"user\": 7}")
        .send()
        .await?;
    let status = response.status();
    println!(
        "{:<28} {status}  {}",
        "not an order",
        response.text().await?
    );
    Ok(())
}
