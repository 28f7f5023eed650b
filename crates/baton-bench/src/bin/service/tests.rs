//! Smoke tests: the three builds, served in-process over the stand-ins, answer alike.

use crate::front::{self, Build};
use crate::policy::IN_APP;
use baton_stand_in::{DEFAULT_STOCK, Downstreams, OrderServer};

use crate::answer::OrderResult;
use crate::scenario::Scenario;

type TestResult = Result<(), baton_graph::BoxError>;

/// Serves every build, sends each a few orders at once, and returns every answer.
async fn answers_of_every_build(
    scenario: Scenario,
) -> Result<Vec<(Build, OrderResult)>, baton_graph::BoxError> {
    let stand_ins = OrderServer::start(Downstreams::new()).await?;
    scenario.apply(stand_ins.downstreams(), 1);
    let client = reqwest::Client::builder().no_proxy().build()?;
    let mut calls = tokio::task::JoinSet::new();
    let mut servers = Vec::new();
    for build in Build::ALL {
        let (addr, task) = front::serve(build, stand_ins.base_url()).await?;
        servers.push(task);
        for _ in 0..4 {
            let client = client.clone();
            calls.spawn(async move {
                let response = client
                    .get(format!("http://{addr}/order/7/42"))
                    .send()
                    .await?;
                let status = response.status();
                let body = response.text().await?;
                if status != reqwest::StatusCode::OK {
                    return Err(format!("{} answered {status}: {body}", build.name()).into());
                }
                Ok::<_, baton_graph::BoxError>((build, serde_json::from_str::<OrderResult>(&body)?))
            });
        }
    }
    let mut answers = Vec::new();
    while let Some(done) = calls.join_next().await {
        answers.push(done??);
    }
    for server in servers {
        server.abort();
    }
    Ok(answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_build_places_the_same_order_when_healthy() -> TestResult {
    let answers = answers_of_every_build(Scenario::Healthy).await?;
    let expected = OrderResult {
        quantity: DEFAULT_STOCK,
        status: "shipped".to_owned(),
        reference: "SF00070042".to_owned(),
        message: "sku 42 shipped, tracking SF00070042".to_owned(),
    };
    assert_eq!(answers.len(), 12);
    for (build, answer) in answers {
        assert_eq!(answer, expected, "{}", build.name());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_build_falls_back_alike_when_stock_is_down() -> TestResult {
    let answers = answers_of_every_build(Scenario::StockDown).await?;
    let expected = OrderResult {
        quantity: 0,
        status: "backordered".to_owned(),
        reference: "BO-7-42".to_owned(),
        message: "sku 42 is out of stock: backordered as BO-7-42".to_owned(),
    };
    assert_eq!(answers.len(), 12);
    for (build, answer) in answers {
        assert_eq!(answer, expected, "{}", build.name());
        assert_ne!(answer.message, IN_APP);
    }
    Ok(())
}
