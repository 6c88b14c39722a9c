pub mod fake_telegram;
