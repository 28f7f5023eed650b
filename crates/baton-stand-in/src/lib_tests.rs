//! The stand-ins' own checks: names round-trip, behaviours plan what they say, and the
//! server answers, fails and stops at the caller's budget.

use std::time::Duration;

use reqwest::StatusCode;

use crate::*;

#[test]
fn service_and_channel_names_round_trip() {
    for service in Service::ALL {
        assert_eq!(service.name().parse::<Service>(), Ok(service));
    }
    for channel in Channel::ALL {
        assert_eq!(channel.name().parse::<Channel>(), Ok(channel));
        assert_eq!(channel.name().parse::<Service>(), Ok(channel.service()));
    }
    assert_eq!("STOCK".parse::<Service>(), Ok(Service::Stock));
    assert!("payment".parse::<Service>().is_err());
    assert!("stock".parse::<Channel>().is_err());
}

#[test]
fn behavior_plans_latency_status_and_stock() {
    let plan = Behavior::new()
        .fail()
        .slow_by(Duration::from_millis(30))
        .plan(Service::Stock, 1, 100);
    assert_eq!(plan.delay, Duration::from_millis(180));
    assert_eq!(plan.status, Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(plan.stock, DEFAULT_STOCK);
    let plan = Behavior::new().plan(Service::Notify, 1, 100);
    assert_eq!(plan.delay, Duration::from_millis(50));
    assert_eq!(plan.status, None);
    assert_eq!(
        Behavior::new().stock(0).plan(Service::Stock, 1, 100).stock,
        0
    );
}

#[test]
fn fail_first_fails_only_the_first_calls() {
    let flaky = Behavior::new().fail_first(2);
    let statuses: Vec<_> = (1..=4)
        .map(|call| flaky.plan(Service::Stock, call, 100).status)
        .collect();
    let unavailable = Some(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(statuses, [unavailable, unavailable, None, None]);
    assert_eq!(flaky.succeed().plan(Service::Stock, 1, 100).status, None);
}

#[test]
fn down_fails_at_once_and_fail_percent_fails_that_share() {
    let down = Behavior::new()
        .slow_by(ms(30))
        .down()
        .plan(Service::Stock, 1, 100);
    assert_eq!(down.delay, Duration::ZERO);
    assert_eq!(down.status, Some(StatusCode::SERVICE_UNAVAILABLE));
    let flaky = Behavior::new().fail_percent(50);
    let unavailable = Some(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(flaky.plan(Service::Stock, 1, 49).status, unavailable);
    assert_eq!(flaky.plan(Service::Stock, 1, 50).status, None);
    assert_eq!(flaky.plan(Service::Stock, 1, 0).delay, ms(150));
    let healed = flaky.down().succeed().plan(Service::Stock, 1, 0);
    assert_eq!((healed.delay, healed.status), (ms(150), None));
}

#[test]
fn a_seed_replays_the_same_failures() {
    let downstreams = Downstreams::new();
    downstreams.set(Service::Stock, Behavior::new().fail_percent(50));
    let draw = |seed| {
        downstreams.seed(seed);
        (0..64)
            .map(|_| downstreams.begin(Service::Stock).status.is_some())
            .collect::<Vec<_>>()
    };
    let first = draw(7);
    assert_eq!(first, draw(7));
    let failed = first.iter().filter(|f| **f).count();
    assert!((16..=48).contains(&failed), "{failed} of 64 failed");
}

#[tokio::test]
async fn server_answers_and_fails_on_request() -> Result<(), Box<dyn std::error::Error>> {
    let downstreams = Downstreams::new();
    let server = OrderServer::start(downstreams.clone()).await?;
    let api = OrderApi::new(reqwest::Client::new(), server.base_url());
    let order = OrderRequest {
        user_id: 7,
        sku_id: 42,
    };
    let done = api.place_order_serially(&order).await?;
    assert_eq!(done.user_id, 7);
    assert!(done.message.contains("shipped"), "{}", done.message);
    assert_eq!(downstreams.calls(Service::Ship), 1);

    downstreams.update(Service::Stock, |b| b.stock(0));
    let done = api.place_order_serially(&order).await?;
    assert!(done.message.contains("backordered"), "{}", done.message);
    assert_eq!(downstreams.calls(Service::Shortage), 1);

    downstreams.update(Service::Stock, Behavior::fail);
    let err = api.place_order_serially(&order).await.err();
    let msg = err.as_ref().map(ToString::to_string);
    assert_eq!(
        msg.as_deref(),
        Some("stock answered 503 Service Unavailable")
    );
    assert_eq!(downstreams.calls(Service::Stock), 3);
    assert_eq!(downstreams.calls(Service::Notify), 2);

    drop(api);
    server.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn server_stops_at_the_callers_budget() -> Result<(), Box<dyn std::error::Error>> {
    let downstreams = Downstreams::new();
    downstreams.update(Service::Push, |b| b.slow_by(Duration::from_millis(500)));
    let server = OrderServer::start(downstreams.clone()).await?;
    let api = OrderApi::new(reqwest::Client::new(), server.base_url());
    let notice = Notice {
        borrow_id: 1,
        user_id: 7,
        isbn: "978-7-111-00000-0".to_owned(),
    };
    let sent = api.send(Channel::Mail, &notice).await?;
    assert_eq!(sent.channel, "mail");

    // The client waits for the server's answer (a long grace, a backstop only): the
    // test checks what the server did, not how fast a loaded machine delivered it.
    let err = api
        .within(Some(Duration::from_millis(100)))
        .with_grace(Duration::from_secs(30))
        .send(Channel::Push, &notice)
        .await
        .err();
    // The server stops at the caller's deadline instead of working 530 ms for nobody:
    // it answers 504 (the push would have succeeded), from the early-stop path.
    assert!(
        matches!(
            err,
            Some(CallError::Status {
                status: StatusCode::GATEWAY_TIMEOUT,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(downstreams.stopped_early(Service::Push), 1);

    drop(api);
    server.shutdown().await?;
    Ok(())
}

#[test]
fn a_borrowed_deduct_stock_body_is_the_owned_ones_json() {
    let user = User {
        id: 7,
        name: "Ada".to_owned(),
        level: "gold".to_owned(),
    };
    let sku = Sku {
        id: 9,
        title: "kettle".to_owned(),
        price_cents: 2_999,
    };
    let borrowed = serde_json::to_string(&wire::DeductStockRef {
        user: &user,
        sku: &sku,
    })
    .ok();
    let owned = serde_json::to_string(&DeductStock { user, sku }).ok();
    assert!(borrowed.is_some());
    assert_eq!(borrowed, owned);
}
