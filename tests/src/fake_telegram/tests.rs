//! The fake Telegram checked on its own: method names in any case, offsets, limits, bodies
//! in each encoding, files, and the builders.

use super::*;

fn client() -> reqwest::Client {
    crate::http_client().no_proxy().build().unwrap()
}

async fn call(fake: &FakeTelegram, method: &str, body: Value) -> (u16, Value) {
    let url = format!("{}/bot{}/{method}", fake.api_root(), fake.token());
    let resp = client().post(url).json(&body).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn get_me_any_case_and_wrong_token() {
    let fake = FakeTelegram::start().await;
    let (status, body) = call(&fake, "GetMe", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["username"], "tess_bot");
    assert_eq!(body["result"]["id"], 123);
    for key in [
        "can_join_groups",
        "can_read_all_group_messages",
        "supports_inline_queries",
        "has_main_web_app",
    ] {
        assert!(body["result"][key].is_boolean(), "{key}");
    }
    let resp = client()
        .post(format!("{}/bot123:wrong/getMe", fake.api_root()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(
        body,
        json!({"ok": false, "error_code": 401, "description": "Unauthorized"})
    );
    let (status, _) = call(&fake, "noSuchMethod", json!({})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn offsets_confirm_and_long_polls_wake_on_push() {
    let fake = FakeTelegram::start().await;
    let a = fake.push_update(tg::message(tg::text(
        tg::private_chat(5, "Ann"),
        tg::user(5, "Ann"),
        "one",
    )));
    let (_, body) = call(&fake, "getUpdates", json!({})).await;
    assert_eq!(body["result"][0]["update_id"], a);
    assert_eq!(body["result"][0]["message"]["message_id"], 1);
    // Not confirmed yet: asked again, it comes again.
    let (_, body) = call(&fake, "getUpdates", json!({"offset": a})).await;
    assert_eq!(body["result"].as_array().unwrap().len(), 1);
    // A long poll with nothing new waits for the next push.
    let poll = tokio::spawn({
        let url = format!("{}/bot{}/getUpdates", fake.api_root(), fake.token());
        async move {
            client()
                .post(url)
                .json(&json!({"offset": a + 1, "timeout": 30}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    });
    fake.wait_for_calls("getUpdates", 3, Duration::from_secs(10))
        .await;
    assert!(fake.pending_updates().is_empty());
    let b = fake.push_update(tg::message(tg::text(
        tg::private_chat(5, "Ann"),
        tg::user(5, "Ann"),
        "two",
    )));
    let body = poll.await.unwrap();
    assert_eq!(body["result"][0]["update_id"], b);
    assert_eq!(body["result"][0]["message"]["message_id"], 2);
    // A short poll with nothing new answers at once.
    let (_, body) = call(&fake, "getUpdates", json!({"offset": b + 1})).await;
    assert_eq!(body["result"], json!([]));
}

#[tokio::test]
async fn send_message_records_and_enforces_limits() {
    let fake = FakeTelegram::start().await;
    fake.push_update(tg::message(tg::text(
        tg::forum(-1009, "Club"),
        tg::user(5, "Ann"),
        "x",
    )));
    let (status, body) = call(
        &fake,
        "sendMessage",
        json!({"chat_id": -1009, "text": "a".repeat(4097)}),
    )
    .await;
    assert_eq!(
        (status, body["description"].as_str()),
        (400, Some("Bad Request: message is too long"))
    );
    let (status, body) = call(
        &fake,
        "sendMessage",
        json!({"chat_id": -1009, "text": "hi", "reply_parameters": {"message_id": 99}}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    fake.fail_next_sends(1, 3);
    let (status, body) = call(
        &fake,
        "sendMessage",
        json!({"chat_id": -1009, "text": "hi"}),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(body["parameters"]["retry_after"], 3);
    assert_eq!(body["description"], "Too Many Requests: retry after 3");
    let (status, body) = call(
        &fake,
        "SendMessage",
        json!({"chat_id": "-1009", "text": "hi", "reply_parameters": {"message_id": 1}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["message_id"], 2);
    assert_eq!(body["result"]["reply_to_message"]["text"], "x");
    assert_eq!(body["result"]["chat"]["title"], "Club");
    let sent = fake.wait_for_sent(1, Duration::from_secs(5)).await;
    assert_eq!(sent[0].reply_to_message_id(), Some(1));
    assert_eq!(fake.send_attempts(), 4);
}

#[tokio::test]
async fn form_and_multipart_bodies() {
    let fake = FakeTelegram::start().await;
    let url = format!("{}/bot{}/sendMessage", fake.api_root(), fake.token());
    let resp = client()
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("chat_id=5&text=hello+there%21&reply_parameters=%7B%22message_id%22%3A9%2C%22allow_sending_without_reply%22%3Atrue%7D")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sent = fake.sent_messages();
    assert_eq!(sent[0].text, "hello there!");
    assert_eq!(sent[0].reply_to_message_id(), Some(9));

    let boundary = "XyZ";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"url\"\r\n\r\nhttps://example.org/hook\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"secret_token\"\r\n\r\nsecret_1\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"allowed_updates\"\r\n\r\n[\"message\"]\r\n--{boundary}--\r\n"
    );
    let resp = client()
        .post(format!(
            "{}/bot{}/SetWebhook",
            fake.api_root(),
            fake.token()
        ))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        fake.set_webhook_info(),
        Some(WebhookRegistration {
            url: "https://example.org/hook".into(),
            secret_token: Some("secret_1".into()),
            allowed_updates: Some(vec!["message".into()])
        })
    );
    let (status, _) = call(&fake, "getUpdates", json!({})).await;
    assert_eq!(status, 409);
}

#[tokio::test]
async fn files_and_leaving() {
    let fake = FakeTelegram::start().await;
    fake.add_file("F1", "documents/file_1.txt", b"hello");
    let (_, body) = call(&fake, "getFile", json!({"file_id": "F1"})).await;
    let path = body["result"]["file_path"].as_str().unwrap().to_string();
    let bytes = client()
        .get(format!(
            "{}/file/bot{}/{path}",
            fake.api_root(),
            fake.token()
        ))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&bytes[..], b"hello");
    let (status, _) = call(&fake, "leaveChat", json!({"chat_id": -77})).await;
    assert_eq!(status, 200);
    assert_eq!(
        fake.wait_for_left(1, Duration::from_secs(5)).await,
        vec![-77]
    );
}

#[test]
fn mention_builder_counts_utf16() {
    let m = tg::mentioning(
        tg::text(tg::group(-1, "g"), tg::user(1, "a"), "😀 hi @tess_bot"),
        "tess_bot",
    );
    assert_eq!(
        m["entities"][0],
        json!({"type": "mention", "offset": 6, "length": 9})
    );
}

#[tokio::test]
async fn entities_are_checked_kept_on_the_message_and_recorded() {
    let fake = FakeTelegram::start().await;
    let bold = json!([{"type": "bold", "offset": 0, "length": 4}]);
    let (status, body) = call(
        &fake,
        "sendMessage",
        json!({"chat_id": 5, "text": "Ada: hi", "entities": bold}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["entities"], bold);
    let id = body["result"]["message_id"].as_i64().unwrap();
    assert_eq!(
        fake.sent_messages()[0].entities,
        bold.as_array().unwrap().clone()
    );
    assert_eq!(fake.message(5, id).unwrap()["entities"], bold);
    // An entity without its place is refused, as the Bot API refuses it.
    let (status, body) = call(
        &fake,
        "sendMessage",
        json!({"chat_id": 5, "text": "x", "entities": [{"type": "bold"}]}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .contains("can't parse entities")
    );
    // An edit with the same text but other entities changes the message; the same again
    // does not.
    let edit = |entities: Value| json!({"chat_id": 5, "message_id": id, "text": "Ada: hi", "entities": entities});
    let (status, _) = call(&fake, "editMessageText", edit(json!([]))).await;
    assert_eq!(status, 200);
    assert!(fake.message(5, id).unwrap().get("entities").is_none());
    let (status, _) = call(&fake, "editMessageText", edit(bold.clone())).await;
    assert_eq!(status, 200);
    assert_eq!(fake.edits()[1].entities, bold.as_array().unwrap().clone());
    let (status, _) = call(&fake, "editMessageText", edit(bold.clone())).await;
    assert_eq!(status, 400, "not modified");
}
