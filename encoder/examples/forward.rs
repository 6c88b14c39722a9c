//! The forward pass's throughput alone, without the gateway: the model of a
//! sentence-transformers directory run over texts of token ids, cut into passes as
//! knowledge/embed/local.rs cuts them (sorted by length, at most 8,192 tokens and 256 texts a
//! pass), one line of texts a second per round.
//!
//! ```sh
//! cargo run --release -p troupe-encoder --example forward -- MODEL_DIR [TEXTS] [TOKENS] [ROUNDS]
//! ```
//!
//! TEXTS texts (256) of TOKENS tokens (0, the default: 20 to 70, as Vaswani's abstracts are;
//! 256 is a chunk-sized text's window). The ids are arbitrary words of the vocabulary: a
//! pass costs the same whatever they are. For comparing two builds of the encoder, run
//! alternately; `troupe bench --embed-texts` measures the whole embedder with its tokenizer.

use std::time::Instant;

use troupe_encoder::{Bert, Config};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::path::PathBuf::from(args.first().ok_or("usage: forward MODEL_DIR …")?);
    let number = |at: usize, default: usize| -> Result<usize, Box<dyn std::error::Error>> {
        Ok(args
            .get(at)
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or(default))
    };
    let (count, tokens, rounds) = (number(1, 256)?, number(2, 0)?, number(3, 3)?);
    let config: Config = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
    let weights = std::fs::read(dir.join("model.safetensors"))?;
    let bert = Bert::load(&weights, &config)?;
    let vocab = config.vocab_size as u64;
    let mut texts: Vec<Vec<u32>> = (0..count as u64)
        .map(|i| {
            let n = if tokens > 0 {
                tokens
            } else {
                20 + (i * 37 % 51) as usize
            };
            (0..n as u64)
                .map(|j| (1000 + (i * 7919 + j * 104_729) % (vocab - 1000)) as u32)
                .collect()
        })
        .collect();
    texts.sort_by_key(Vec::len);
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let mut at = 0;
        while at < texts.len() {
            // As local.rs's `passes`: rows × the longest (the last, sorted) within budget.
            let mut end = at + 1;
            while end < texts.len() && end - at < 256 && (end + 1 - at) * texts[end].len() <= 8192 {
                end += 1;
            }
            let pass: Vec<&[u32]> = texts[at..end].iter().map(Vec::as_slice).collect();
            std::hint::black_box(bert.forward(&pass)?);
            at = end;
        }
        let seconds = started.elapsed().as_secs_f64();
        println!("{:.1} texts/s", texts.len() as f64 / seconds);
    }
    Ok(())
}
