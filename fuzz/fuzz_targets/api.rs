//! Fuzzes what the server reads from a request body and from a model's
//! answer: any bytes either parse as a JSON object, and then every field
//! reader (sampling parameters for both endpoints, the prompt, the
//! messages, the tools, each format's tool preparation and constraint)
//! returns its value or a 400 naming a field, or are refused with a 400;
//! a structured output that compiles (over a byte vocabulary) runs for
//! up to 64 tokens, each chosen by the input among those its mask allows,
//! and a token its mask allows is always accepted. The input as text is
//! also a model's answer, parsed for tool calls in every format. Seed the
//! corpus with request bodies (e.g. the bodies in `host/server/tests`):
//!   cargo +nightly fuzz run api -- -max_total_time=60
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagoda_engine::structured::Structured;
use pagoda_server::openai::{self, Prompt};
use pagoda_server::tools::{self, ToolFormat};
use std::sync::OnceLock;

const FORMATS: [ToolFormat; 3] = [ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Generic];
const LOGITS: u32 = 300;

fn structured() -> &'static Structured {
    static S: OnceLock<Structured> = OnceLock::new();
    S.get_or_init(|| Structured::for_bytes(LOGITS).expect("byte vocabulary"))
}

fn field_error(e: &pagoda_server::ApiError) {
    assert_eq!(e.status.as_u16(), 400, "{e:?}");
    assert!(!e.message.is_empty());
}

fuzz_target!(|data: &[u8]| {
    // A model's answer, in every tool-call format.
    let text = String::from_utf8_lossy(data);
    for format in FORMATS {
        let (content, calls) = tools::parse_output(format, &text);
        assert!(content.as_ref().is_none_or(|c| !c.trim().is_empty()));
        for c in &calls {
            assert!(serde_json::from_str::<serde_json::Value>(&c.arguments).is_ok());
        }
    }

    let map = match openai::parse_object(data) {
        Ok(map) => map,
        Err(e) => return field_error(&e),
    };
    let mut outputs = Vec::new();
    for chat in [false, true] {
        match openai::params(&map, chat) {
            Ok(p) => outputs.extend(p.output.map(|(spec, _)| spec)),
            Err(e) => field_error(&e),
        }
    }
    if let Err(e) = openai::completion_prompt(&map) {
        field_error(&e);
    }
    let messages = match openai::chat_messages(&map) {
        Ok(Prompt::Chat(m)) => {
            assert!(m
                .iter()
                .all(|m| m["content"].is_null() || m["content"].is_string()));
            Some(m)
        }
        Ok(other) => panic!("messages read as {other:?}"),
        Err(e) => {
            field_error(&e);
            None
        }
    };
    match tools::parse(&map) {
        Ok(Some(t)) => {
            let _ = t.active();
            for format in FORMATS {
                if let Some(m) = &messages {
                    let _ = t.prepare(format, m.clone());
                }
                outputs.extend(t.constraint(format));
            }
        }
        Ok(None) => {}
        Err(e) => field_error(&e),
    }

    // Each structured output that compiles, run on tokens its masks allow.
    let mut picks = data.iter().rev().cycle();
    for spec in outputs.iter().take(2) {
        let Ok(constraint) = structured().compile(spec) else {
            continue;
        };
        let mut run = constraint.0.start();
        let mut logits = vec![0f32; LOGITS as usize];
        for _ in 0..64 {
            if run.is_finished() {
                break;
            }
            logits.fill(0.0);
            if run.mask(&mut logits).is_err() {
                break;
            }
            let allowed: Vec<u32> = (0..LOGITS).filter(|&t| logits[t as usize] == 0.0).collect();
            let Some(&pick) = picks.next() else { break };
            let Some(&token) = allowed.get(usize::from(pick) % allowed.len().max(1)) else {
                break;
            };
            run.accept(token).expect("a token the mask allows");
        }
    }
});
