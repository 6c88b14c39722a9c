//! Voice in, end to end (issue 32): the real `troupe run`, the fake Telegram (a voice note
//! and its file behind `getFile`) and the fake OpenAI, whose audio route
//! (`/v1/audio/transcriptions`, tests/src/fake_openai/audio.rs) answers a scripted
//! transcript and records what it was sent.
//!
//! A voice note's transcript is the message's text: the model is asked about what was
//! said, marked as transcribed, and the room remembers it so. A transcription that fails is
//! a line telling the persona the voice note could not be heard, and the message is still
//! answered.
//!
//! Voice out (`TROUPE_SPEECH_MODEL`): a voice note is answered with a voice note made by the
//! fake's `/v1/audio/speech` (its bytes sent with `sendVoice`) and the text as a message; a
//! text message gets text only; a failed speech request still sends the text. On Discord
//! the voice note is a voice message (flag 8192, one Ogg attachment with `duration_secs`
//! and `waveform`, tests/src/fake_discord/voice.rs) before the text; a refused upload still
//! sends the text.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_discord::{Author, FakeDiscord, NewMessage, TOKEN, Upload};
use troupe_e2e::fake_openai::audio::{Heard, speech_ogg};
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{Backend, FakeOpenAi, Script, TestApp, TestAppOptions};

/// A hang guard, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

/// The first bytes of an Ogg Opus file; the gateway never decodes them.
fn ogg(len: usize) -> Vec<u8> {
    let mut bytes = b"OggS\0\x02".to_vec();
    bytes.resize(len, 7);
    bytes
}

/// A voice note as Telegram sends it (no text, no caption). The fake numbers only messages
/// with text, so a voice note brings its own id, `id` (the fake numbers on after it).
fn voice(chat: Value, from: Value, (id, file_id): (i64, &str), size: usize) -> Value {
    json!({"chat": chat, "from": from, "message_id": id, "voice": {
        "file_id": file_id, "file_unique_id": format!("u-{file_id}"),
        "duration": 3, "mime_type": "audio/ogg", "file_size": size
    }})
}

async fn telegram_app(
    telegram: &FakeTelegram,
    openai: &FakeOpenAi,
    env: &[(&str, &str)],
) -> TestApp {
    let character = telegram.persona("Vera", "Vera listens to voice notes and answers them.");
    let mut options = TestAppOptions::new(Backend::Sqlite)
        .persona_file("vera.json", character)
        .openai(openai);
    for (k, v) in env {
        options = options.env(k, v);
    }
    TestApp::spawn(options).await
}

/// The prompt of chat request `n` (0-based): its last user message and the whole text.
async fn asked(openai: &FakeOpenAi, app: &TestApp, n: usize) -> (String, String) {
    let seen = match openai.try_wait_for_requests(n + 1, WAIT).await {
        Ok(seen) => seen,
        Err(e) => panic!("{e}\n----- troupe output -----\n{}", app.logs()),
    };
    let last = seen[n].last_user_message().unwrap_or_default().to_string();
    (last, seen[n].prompt_text())
}

#[tokio::test]
async fn a_telegram_voice_note_is_transcribed_answered_and_remembered_as_heard() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let app = telegram_app(&telegram, &openai, &[]).await;
    let chat = || tg::private_chat(601, "Ann");
    let ann = || tg::user(601, "Ann");

    let note = ogg(3000);
    telegram.add_file("V-1", "voice/file_1.oga", &note);
    openai
        .audio()
        .push(Heard::Text("what's the weather like on Mars?".into()));
    telegram.push_message(voice(chat(), ann(), (100, "V-1"), note.len()));
    let (text, _) = asked(&openai, &app, 0).await;
    assert!(
        text.contains("[voice, transcribed] what's the weather like on Mars?"),
        "{text}"
    );
    let heard = openai.audio().requests();
    assert_eq!(heard.len(), 1, "one transcription request");
    assert_eq!(heard[0].model.as_deref(), Some("whisper-1"));
    assert_eq!(heard[0].file, note, "the voice note's bytes, as sent");
    assert_eq!(heard[0].content_type.as_deref(), Some("audio/ogg"));
    assert_eq!(heard[0].api_key.as_deref(), openai.api_key());
    assert_eq!(telegram.calls_to("getFile").len(), 1);

    // The room remembers the transcript, marked as heard: it is in the next prompt's history.
    telegram.push_message(tg::text(chat(), ann(), "and on Venus?"));
    let (text, whole) = asked(&openai, &app, 1).await;
    assert!(text.contains("and on Venus?"), "{text}");
    assert!(
        whole.contains("[voice, transcribed] what's the weather like on Mars?"),
        "{whole}"
    );
    assert_eq!(
        openai.audio().requests().len(),
        1,
        "a text message is not transcribed"
    );

    // A failed transcription is a line for the persona, never a failed message.
    telegram.add_file("V-2", "voice/file_2.oga", &ogg(2000));
    openai.audio().push(Heard::Status(500));
    telegram.push_message(voice(chat(), ann(), (200, "V-2"), 2000));
    let (text, _) = asked(&openai, &app, 2).await;
    assert!(text.contains("could not be heard"), "{text}");
    assert!(text.contains("answered 500"), "{text}");
    assert!(
        !app.logs().contains(telegram.token()),
        "the bot token reached the logs"
    );
}

/// A transcription is a model call in spend: one record with the purpose `transcribe`, in
/// the seconds the provider reported (ten prompt tokens a second), at `whisper-1`'s price
/// ($10 a million: $0.006 a minute). With a budget set, the record is written before the
/// reply's call is made, so it is there once the model has been asked.
#[tokio::test]
async fn a_transcription_is_recorded_in_spend_as_transcribe() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let budget = ("TROUPE_SPEND_PERSONA_PER_DAY", "1000000 tokens");
    let app = telegram_app(&telegram, &openai, &[budget]).await;
    let chat = || tg::private_chat(604, "Di");
    let di = || tg::user(604, "Di");
    telegram.add_file("V-4", "voice/file_5.oga", &ogg(3000));
    openai
        .audio()
        .push(Heard::Timed("how far is the moon?".into(), 2.4));
    telegram.push_message(voice(chat(), di(), (100, "V-4"), 3000));
    let (text, _) = asked(&openai, &app, 0).await;
    assert!(text.contains("how far is the moon?"), "{text}");
    let (status, usage) = app.get("/api/agents/Vera/usage?by=purpose").await;
    assert_eq!(status, 200, "{usage}");
    let rows = usage["rows"].as_array().cloned().unwrap_or_default();
    let heard: Vec<&Value> = rows.iter().filter(|r| r["key"] == "transcribe").collect();
    assert_eq!(heard.len(), 1, "{usage}");
    assert_eq!(heard[0]["calls"], 1, "{usage}");
    assert_eq!(
        heard[0]["promptTokens"], 30,
        "3 s (2.4, rounded up): {usage}"
    );
    assert_eq!(heard[0]["costMicros"], 300, "{usage}");
    let (_, by_model) = app.get("/api/agents/Vera/usage?by=model").await;
    assert!(
        by_model.to_string().contains("openai:whisper-1"),
        "{by_model}"
    );
}

#[tokio::test]
async fn a_voice_note_over_the_media_cap_is_refused_unfetched_and_the_persona_told_why() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let app = telegram_app(&telegram, &openai, &[("TROUPE_MEDIA_MAX_BYTES", "1000")]).await;
    let chat = || tg::private_chat(602, "Bo");
    let bo = || tg::user(602, "Bo");
    telegram.add_file("V-big", "voice/file_3.oga", &ogg(5000));
    telegram.push_message(voice(chat(), bo(), (100, "V-big"), 5000));
    let (text, _) = asked(&openai, &app, 0).await;
    assert!(text.contains("could not be heard"), "{text}");
    assert!(text.contains("TROUPE_MEDIA_MAX_BYTES"), "{text}");
    assert!(openai.audio().requests().is_empty(), "nothing was sent");
    assert!(
        telegram.calls_to("getFile").is_empty(),
        "refused from the announced size"
    );
}

#[tokio::test]
async fn with_transcription_off_a_voice_note_is_not_sent_and_the_persona_told_why() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let app = telegram_app(&telegram, &openai, &[("TROUPE_TRANSCRIBE", "off")]).await;
    let chat = || tg::private_chat(603, "Cy");
    let cy = || tg::user(603, "Cy");
    telegram.add_file("V-3", "voice/file_4.oga", &ogg(500));
    telegram.push_message(voice(chat(), cy(), (100, "V-3"), 500));
    let (text, _) = asked(&openai, &app, 0).await;
    assert!(text.contains("TROUPE_TRANSCRIBE=off"), "{text}");
    assert!(openai.audio().requests().is_empty(), "nothing was sent");
}

async fn discord_app(discord: &FakeDiscord, openai: &FakeOpenAi, env: &[(&str, &str)]) -> TestApp {
    let character = discord.persona("Dot", "Dot listens to voice messages and answers them.");
    let mut options = TestAppOptions::new(Backend::Sqlite)
        .persona_file("dot.json", character)
        .openai(openai);
    for (k, v) in env {
        options = options.env(k, v);
    }
    let app = TestApp::spawn(options).await;
    if let Err(e) = discord.try_wait_for_ready(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    app
}

/// A Discord voice message from `author` in the DM `channel`: its Ogg file on the fake CDN.
fn discord_voice(discord: &FakeDiscord, channel: &str, author: &str, note: &[u8]) -> String {
    let url = discord.add_cdn_file("voice-message.ogg", note);
    discord.send_message_create(
        NewMessage::dm(channel, Author::person(author), "").as_voice_message(
            &url,
            note.len() as u64,
            2.0,
        ),
    )
}

#[tokio::test]
async fn a_discord_voice_message_is_transcribed_and_answered() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let app = discord_app(&discord, &openai, &[]).await;
    let note = ogg(4000);
    openai
        .audio()
        .push(Heard::Text("can you hear me, Dot?".into()));
    discord_voice(&discord, "420000000000000001", "alice", &note);
    let (text, _) = asked(&openai, &app, 0).await;
    assert!(
        text.contains("[voice, transcribed] can you hear me, Dot?"),
        "{text}"
    );
    let heard = openai.audio().requests();
    assert_eq!(heard.len(), 1);
    assert_eq!(heard[0].file, note);
    assert_eq!(heard[0].file_name.as_deref(), Some("voice-message.ogg"));
}

#[tokio::test]
async fn a_telegram_voice_note_is_answered_by_voice_and_text() {
    let telegram = FakeTelegram::start().await;
    let openai = FakeOpenAi::start().await;
    let app = telegram_app(
        &telegram,
        &openai,
        &[
            ("TROUPE_SPEECH_MODEL", "tts-1"),
            ("TROUPE_SPEECH_VOICE", "nova"),
        ],
    )
    .await;
    let chat = || tg::private_chat(602, "Bo");
    let bo = || tg::user(602, "Bo");

    telegram.add_file("V-9", "voice/file_9.oga", &ogg(1500));
    openai.push_reply("Mars is cold and dusty today.");
    telegram.push_message(voice(chat(), bo(), (300, "V-9"), 1500));
    let voices = app.expect(telegram.try_wait_for_voices(1, WAIT).await);
    let sent = app.expect(telegram.try_wait_for_sent(1, WAIT).await);
    assert_eq!(
        sent[0].text, "Mars is cold and dusty today.",
        "the text too"
    );
    assert_eq!(
        voices[0].voice,
        speech_ogg(),
        "the bytes the speech route made"
    );
    assert_eq!(
        voices[0].duration,
        Some(2),
        "the length read from the Ogg pages"
    );
    assert_eq!(voices[0].reply_to_message_id, Some(300));
    let spoken = openai.audio().speech_requests();
    assert_eq!(spoken.len(), 1);
    assert_eq!(spoken[0].model.as_deref(), Some("tts-1"));
    assert_eq!(spoken[0].voice.as_deref(), Some("nova"));
    assert_eq!(spoken[0].response_format.as_deref(), Some("opus"));
    assert_eq!(
        spoken[0].input.as_deref(),
        Some("Mars is cold and dusty today.")
    );
    assert_eq!(spoken[0].api_key.as_deref(), openai.api_key());

    // A typed message is answered in text only.
    openai.push_reply("Venus is hotter.");
    telegram.push_message(tg::text(chat(), bo(), "and Venus?"));
    app.expect(telegram.try_wait_for_sent(2, WAIT).await);
    assert_eq!(
        openai.audio().speech_requests().len(),
        1,
        "no speech for text"
    );

    // A speech request that fails still sends the text.
    telegram.add_file("V-10", "voice/file_10.oga", &ogg(1500));
    openai.audio().fail_next_speech(500);
    openai.push_reply("Jupiter is big.");
    telegram.push_message(voice(chat(), bo(), (400, "V-10"), 1500));
    let sent = app.expect(telegram.try_wait_for_sent(3, WAIT).await);
    assert_eq!(sent[2].text, "Jupiter is big.");
    assert_eq!(
        telegram.voices().len(),
        1,
        "no voice note when speech failed"
    );
    assert_eq!(openai.audio().speech_requests().len(), 2);
}

#[tokio::test]
async fn audio_posted_to_the_api_is_transcribed_and_answered() {
    use base64::Engine;
    let openai = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Vera", "Vera listens to voice notes and answers them.")
            .openai(&openai),
    )
    .await;
    openai
        .audio()
        .push(Heard::Text("how far is the moon?".into()));
    openai.push_reply("About 384,000 km.");
    let note = ogg(2500);
    let data = base64::engine::general_purpose::STANDARD.encode(&note);
    let (status, body) = app
        .post_message(
            "Vera",
            &json!({"text": "(voice)", "attachments": [{"data": data, "mime": "audio/ogg"}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["replies"][0]["text"], "About 384,000 km.", "{body}");
    let heard = openai.audio().requests();
    assert_eq!(heard.len(), 1, "one transcription request");
    assert_eq!(heard[0].file, note, "the posted bytes, as sent");
    assert_eq!(heard[0].content_type.as_deref(), Some("audio/ogg"));
    let (text, _) = asked(&openai, &app, 0).await;
    assert!(
        text.contains("[voice, transcribed] how far is the moon?"),
        "{text}"
    );

    // Bytes that are neither an image nor audio are still refused, with the reason.
    let (status, body) = app
        .post_message(
            "Vera",
            &json!({"text": "(voice)", "attachments": [{"data": "aGVsbG8gd29ybGQ="}]}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
}

/// A voice message as Discord takes one: the voice flag only, no content, an Ogg file
/// with its length and a waveform, a reply to `asked` that does not ping (the text does).
fn assert_a_voice_message(voice: &Upload, asked: &str) {
    assert_eq!(voice.flags, 8192, "IS_VOICE_MESSAGE, nothing else");
    assert_eq!(voice.content, "", "a voice message has no content");
    assert_eq!(voice.filename, "voice-message.ogg");
    assert_eq!(voice.content_type.as_deref(), Some("audio/ogg"));
    assert_eq!(voice.bytes, speech_ogg(), "the bytes the speech route made");
    let duration = voice.duration_secs.unwrap_or_default();
    assert!(
        (duration - 2.0).abs() < 0.01,
        "the length read from the Ogg pages: {duration}"
    );
    let waveform = voice.waveform.clone().unwrap_or_default();
    assert!(
        (1..=256).contains(&waveform.len()),
        "a waveform of 1 to 256 points: {waveform:?}"
    );
    assert_eq!(voice.reply_to.as_deref(), Some(asked), "a reply");
    assert_eq!(voice.replied_user, Some(false), "the text pings, not both");
}

/// An upload Discord refuses (the bot lacks Send Voice Messages there) still sends the
/// text, and nothing is said twice.
async fn a_refused_upload_still_sends_the_text(
    app: &TestApp,
    discord: &FakeDiscord,
    openai: &FakeOpenAi,
    channel: &str,
) {
    discord.refuse_next_send(403, 50013, "Missing Permissions");
    openai.audio().push(Heard::Text("and Venus?".into()));
    openai.push_reply("Venus is hotter.");
    discord_voice(discord, channel, "alice", &ogg(2000));
    let sent = app.expect(discord.try_wait_for_sent(2, WAIT).await);
    assert_eq!(sent[1].content, "Venus is hotter.");
    assert_eq!(
        openai.audio().speech_requests().len(),
        2,
        "the speech was made"
    );
    assert_eq!(
        discord.uploads().len(),
        1,
        "the refused upload left nothing"
    );
    let refused = discord
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.status == 403)
        .count();
    assert_eq!(refused, 1, "the voice message was tried once, not retried");
    assert!(
        app.logs().contains("the voice note could not be sent"),
        "the refusal is logged"
    );
    assert!(
        !app.logs().contains(TOKEN),
        "the bot token reached the logs"
    );
}

#[tokio::test]
async fn a_discord_voice_message_is_answered_by_a_voice_message_and_text() {
    let discord = FakeDiscord::start().await;
    let openai = FakeOpenAi::start().await;
    let app = discord_app(
        &discord,
        &openai,
        &[
            ("TROUPE_SPEECH_MODEL", "tts-1"),
            ("TROUPE_STREAM_EDIT_MS", "100"),
        ],
    )
    .await;
    let channel = "420000000000000007";

    // Written slowly enough to be streamed, were it not answered by voice.
    openai.audio().push(Heard::Text("how cold is Mars?".into()));
    openai.push(Script::paced(
        "Mars is cold and dusty today.",
        Duration::from_millis(200),
    ));
    let asked_id = discord_voice(&discord, channel, "alice", &ogg(3000));
    let voices = app.expect(discord.try_wait_for_voice_messages(1, WAIT).await);
    let sent = app.expect(discord.try_wait_for_sent(1, WAIT).await);
    assert_a_voice_message(&voices[0], &asked_id);
    let voice = &voices[0];
    assert_eq!(
        sent[0].content, "Mars is cold and dusty today.",
        "the text too"
    );
    assert_eq!(sent[0].reply_to.as_deref(), Some(asked_id.as_str()));
    let order = |id: &str| id.parse::<u64>().unwrap_or(u64::MAX);
    assert!(
        order(&voice.id) < order(&sent[0].id),
        "the voice message goes before the text"
    );
    assert_eq!(discord.uploads().len(), 1, "one voice message");
    assert!(
        discord.edits().is_empty(),
        "a reply answered by voice is not streamed: {:?}",
        discord.edits()
    );
    assert_eq!(openai.audio().speech_requests().len(), 1);

    a_refused_upload_still_sends_the_text(&app, &discord, &openai, channel).await;
}
