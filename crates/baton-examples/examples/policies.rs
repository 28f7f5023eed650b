//! Policies from a configuration file. `policies.toml`, beside this file, names a circuit
//! breaker, a bulkhead and two policy sets; the graph's nodes take the sets by name. Then
//! an edited configuration is applied while the orchestrator runs: the breaker and the
//! bulkhead the built graph holds take their new thresholds in place, and its runs after
//! the reload take the new timeout. The observer prints the reload's event.
//!
//! ```sh
//! cargo run -p baton-examples --example policies
//! ```

use std::time::Duration;

use baton_graph::{
    BoxError, BuildError, Graph, Orchestrator, Report, config::Config, observe::Event,
};
use tokio::time::sleep;

/// `stock` asks the inventory service (slow: 120 ms, past the 80 ms timeout of
/// `policies.toml`), `price` the pricing service; `total` needs both.
fn checkout(orch: &Orchestrator) -> Result<Graph<u64>, BuildError> {
    let mut g = orch.graph::<u64>();
    let stock = g
        .node("stock")
        .policy_set("stock")
        .task(|ctx, ()| async move {
            sleep(Duration::from_millis(120)).await; // GET /stock/{sku}
            Ok::<_, BoxError>(ctx.input() % 7)
        });
    let price = g
        .node("price")
        .policy_set("price")
        .task(|ctx, ()| async move {
            sleep(Duration::from_millis(30)).await; // GET /price/{sku}
            Ok::<_, BoxError>(ctx.input() * 100)
        });
    g.node("total")
        .after((stock, price))
        .task(|_ctx, (stock, price)| async move { Ok::<_, BoxError>(*stock * *price) });
    g.build()
}

/// The edited configuration: the breaker trips at the first failure, the bulkhead admits
/// one call at a time, and `stock` may take 200 ms.
const EDITED: &str = r#"
[breakers.inventory]
consecutive_failures = 1
open_duration = "5s"

[bulkheads.inventory]
max_concurrent = 1
max_wait = "20ms"

[policies.stock]
timeout = "200ms"
breaker = "inventory"
bulkhead = "inventory"
retry = { max_attempts = 2, backoff = { constant = "10ms" } }

[policies.price]
timeout = "200ms"
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/policies.toml");
    let orch = Orchestrator::builder().observer(print_reloads).build();
    orch.apply(&read(&std::fs::read_to_string(path)?)?)?;

    let graph = checkout(&orch)?;
    show("with policies.toml", &graph.run(42).await?);
    let breaker = orch.breaker("inventory").ok_or("no breaker")?;
    println!(
        "breaker `inventory`: {} after one failed run",
        breaker.state()
    );

    let applied = orch.apply(&read(EDITED)?)?;
    let bulkhead = orch.bulkhead("inventory").ok_or("no bulkhead")?;
    println!(
        "{} policies named; bulkhead `inventory` now admits {} call at a time",
        applied.changes().len(),
        bulkhead.max_concurrent()
    );
    // The graph built before the reload holds the same breaker and bulkhead, with their
    // new thresholds, and its next run takes the edited policy set: the 200 ms timeout.
    show("the same graph, after the reload", &graph.run(42).await?);
    println!("breaker `inventory`: {}", breaker.state());
    Ok(())
}

/// Reads a TOML configuration; a `ConfigError` names the key at fault.
fn read(text: &str) -> Result<Config, Box<dyn std::error::Error>> {
    Ok(Config::from_deserializer(toml::Deserializer::parse(text)?)?)
}

fn show(title: &str, report: &Report) {
    println!("\n== {title}");
    for node in report.nodes() {
        match node.error() {
            Some(e) => println!(
                "  {:<6} {} after {:.1?}: {e}",
                node.name(),
                node.outcome(),
                node.end()
            ),
            None => println!(
                "  {:<6} {} after {:.1?}",
                node.name(),
                node.outcome(),
                node.end()
            ),
        }
    }
}

fn print_reloads(event: &Event<'_>) {
    if let Event::ConfigApplied { .. } = event {
        println!("event: {event}");
    }
}
