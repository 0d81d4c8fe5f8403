//! `pagoda run`: generates text from a GGUF model. One prompt streams its
//! text to the terminal as it is sampled; `--prompts FILE` runs every line
//! as its own request in continuous batches and prints each completion (or
//! one JSON object per line with `--json`) in the file's order.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use pagoda_engine::chat::ChatMessage;
use pagoda_engine::model::{RepackCacheUse, SamplingParams};
use pagoda_engine::{
    Engine, EngineConfig, EngineStorage, Event, GenRequest, Priority, SchedulerConfig, StepBackend,
    StopReason, TextModel, TextStream, WithBackend,
};
use pagoda_server::harmony::Piece;

use crate::answer::Reader;
use serde::Serialize;

use crate::args::RunArgs;
use crate::error::CliError;

/// One prompt, ready to submit.
struct Prepared {
    /// What the user gave (before any chat template).
    text: String,
    /// The chat template's rendering of it (`--chat`).
    rendered: Option<String>,
    ids: Vec<u32>,
    max_new_tokens: u32,
}

/// What `--json` prints for one prompt.
#[derive(Serialize)]
struct RunOutput {
    prompt: String,
    prompt_ids: Vec<u32>,
    output_ids: Vec<u32>,
    text: String,
    stop: &'static str,
    timings: Timings,
    memory: Memory,
    /// The CPU kernels the products ran (`Model::kernels`).
    kernels: String,
    /// What the repack cache did (with `--repack-cache`).
    #[serde(skip_serializing_if = "Option::is_none")]
    repack_cache: Option<RepackCacheUse>,
}

/// Memory of the run, in bytes.
#[derive(Serialize, Clone, Copy)]
struct Memory {
    /// The model file (memory-mapped).
    model_file_bytes: u64,
    /// The KV pool the engine allocated.
    kv_pool_bytes: u64,
    /// A hybrid's recurrent state a sequence holds on the host (absent
    /// for a model without recurrent layers).
    #[serde(skip_serializing_if = "Option::is_none")]
    recurrent_state_bytes_per_sequence: Option<u64>,
    /// The process's peak resident set so far (Linux; absent elsewhere).
    peak_resident_bytes: Option<u64>,
}

/// The process's peak resident set (`VmHWM`), where the OS says it.
fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Seconds and rates of one run.
#[derive(Serialize, Clone, Copy)]
struct Timings {
    /// Opening, mapping and dequantizing the file, building the tokenizer.
    load_s: f64,
    /// From submission to the first token.
    time_to_first_token_s: f64,
    /// Prompt tokens per second of the prefill (to the first token).
    prefill_tokens_per_s: f64,
    /// Output tokens after the first, per second.
    decode_tokens_per_s: f64,
}

/// One request's generation: its text so far, its tokens and its times.
struct Generation {
    stream: TextStream,
    /// How its text splits into reasoning and content.
    reader: Reader,
    text: String,
    output: Vec<u32>,
    submitted: Instant,
    first_token: Option<Instant>,
    /// When and why it ended (`end_of_generation`, `stop_string`, `length`).
    finished: Option<(Instant, &'static str)>,
}

pub(crate) fn run(args: RunArgs) -> Result<(), CliError> {
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repetition_penalty,
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
        ..SamplingParams::GREEDY
    };
    sampling.validate()?;
    if args.template.chat_template.is_some() && !args.chat {
        return Err(CliError::TemplateWithoutChat);
    }
    let started = Instant::now();
    let mut model =
        crate::open_chat_model(&args.model, &args.weights, &args.template, args.backend)?;
    let load_s = started.elapsed().as_secs_f64();
    let kernels = args.backend.kernels(&model.model);
    if !args.quiet && !args.json {
        eprintln!(
            "pagoda: {} ({}, {} layers, {:.0} M parameters) loaded in {:.2} s; kernels {}",
            args.model.display(),
            model.info.architecture,
            model.model.config().layers,
            model.model.parameters() as f64 / 1e6,
            load_s,
            kernels
        );
        if let Some(used) = &model.info.repack_cache {
            eprintln!("pagoda: {used}");
        }
    }

    let texts = prompt_texts(&args)?;
    let context = model.model.config().max_context;
    let mut prepared = Vec::with_capacity(texts.len());
    for text in texts {
        let (ids, rendered) = encode_prompt(&model, &args, &text)?;
        if ids.is_empty() {
            return Err(CliError::EmptyPrompt);
        }
        let room = context.saturating_sub(ids.len() as u32);
        if room == 0 {
            return Err(CliError::PromptTooLong {
                tokens: ids.len(),
                context,
            });
        }
        prepared.push(Prepared {
            text,
            rendered,
            max_new_tokens: args.max_tokens.min(room),
            ids,
        });
    }

    // A pool that holds every request at its longest, unless told.
    let pages_needed: u64 = prepared
        .iter()
        .map(|p| (p.ids.len() as u64 + u64::from(p.max_new_tokens)).div_ceil(16) + 1)
        .sum();
    let kv_pages = args
        .kv_pages
        .unwrap_or(pages_needed.clamp(16, u64::from(u32::MAX)) as u32);
    let config = EngineConfig {
        kv_pages,
        kv_dtype: args.kv_dtype,
        scheduler: SchedulerConfig {
            max_batch: args.max_batch,
            prefill_share: Some(args.prefill_share),
            ..SchedulerConfig::default()
        },
        // Every prompt is queued at the start, and nothing after: a queue
        // of the server's 65,536 slots would hold 15 MB for nothing.
        queue_capacity: prepared.len().clamp(1, u32::MAX as usize) as u32,
        ..EngineConfig::default()
    };
    config.scheduler.validate().map_err(CliError::Scheduler)?;
    let job = RunJob {
        model: &model,
        config: &config,
        prompts: &prepared,
        sampling,
        seed: args.seed,
        stops: &args.stop,
        stream: prepared.len() == 1 && !args.json,
        template: match args.chat {
            true => Some(crate::template_of(&model)?.source().to_string()),
            false => None,
        },
    };
    let backend = args.backend.choice(args.threads);
    let (results, kv_pool_bytes) = backend.open(job).map_err(|error| CliError::Backend {
        name: backend.name(),
        error,
    })??;
    // The cache file written in the background: reported once it is.
    if let Some(RepackCacheUse::Writing { .. }) = &model.info.repack_cache {
        if let Some(used) = model.wait_for_repack_cache() {
            if !args.quiet && !args.json {
                eprintln!("pagoda: {used}");
            }
        }
    }

    let memory = Memory {
        model_file_bytes: model.info.file_bytes,
        kv_pool_bytes,
        recurrent_state_bytes_per_sequence: Some(model.model.recurrent_state_bytes())
            .filter(|&b| b > 0),
        peak_resident_bytes: peak_resident_bytes(),
    };
    let mut stdout = std::io::stdout().lock();
    for (prompt, result) in prepared.iter().zip(results) {
        let timings = result.timings(prompt.ids.len(), load_s);
        if args.json {
            let out = RunOutput {
                prompt: prompt.text.clone(),
                prompt_ids: prompt.ids.clone(),
                output_ids: result.output,
                text: result.text,
                stop: result.finished.map_or("cancelled", |(_, why)| why),
                timings,
                memory,
                kernels: kernels.clone(),
                repack_cache: model.info.repack_cache.clone(),
            };
            let line = serde_json::to_string(&out).map_err(CliError::Json)?;
            writeln!(stdout, "{line}").map_err(CliError::Stdout)?;
        } else if prepared.len() > 1 {
            writeln!(stdout, "{}{}\n", prompt.text, result.text).map_err(CliError::Stdout)?;
        } else {
            writeln!(stdout).map_err(CliError::Stdout)?;
            if !args.quiet {
                eprintln!(
                    "pagoda: {} prompt tokens at {:.1} tokens/s, {} output tokens at {:.1} tokens/s, first token after {:.3} s",
                    prompt.ids.len(),
                    timings.prefill_tokens_per_s,
                    result.output.len(),
                    timings.decode_tokens_per_s,
                    timings.time_to_first_token_s,
                );
            }
        }
    }
    Ok(())
}

/// The prompts: `--prompt`, every non-empty line of `--prompts`, or stdin.
fn prompt_texts(args: &RunArgs) -> Result<Vec<String>, CliError> {
    if let Some(text) = &args.prompt {
        return Ok(vec![text.clone()]);
    }
    if let Some(path) = &args.prompts {
        let all = std::fs::read_to_string(path).map_err(|source| CliError::ReadPrompts {
            path: path.clone(),
            source,
        })?;
        let lines: Vec<String> = all
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        if lines.is_empty() {
            return Err(CliError::EmptyPrompt);
        }
        return Ok(lines);
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(CliError::Stdin)?;
    // `echo TEXT |` ends the prompt with a newline the user did not mean.
    let line = text.strip_suffix('\n').unwrap_or(&text);
    let line = line.strip_suffix('\r').unwrap_or(line);
    Ok(vec![line.to_string()])
}

/// The prompt's ids: the raw text, or the chat template's rendering of one
/// user turn (after `--system` if given) with the assistant's turn opened
/// (and that rendering).
fn encode_prompt(
    model: &TextModel,
    args: &RunArgs,
    text: &str,
) -> Result<(Vec<u32>, Option<String>), CliError> {
    if !args.chat {
        return Ok((model.tokenizer.encode(text, true, true), None));
    }
    let template = crate::template_of(model)?;
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(ChatMessage {
            role: "system".into(),
            content: system.clone(),
        });
    }
    messages.push(ChatMessage {
        role: "user".into(),
        content: text.to_string(),
    });
    let rendered = template.render(&messages, true)?;
    // The template writes BOS itself where the model wants one.
    Ok((
        model.tokenizer.encode(&rendered, false, true),
        Some(rendered),
    ))
}

/// The engine's part of a run, generic over the backend.
struct RunJob<'a> {
    model: &'a TextModel,
    config: &'a EngineConfig,
    prompts: &'a [Prepared],
    sampling: SamplingParams,
    seed: u64,
    stops: &'a [String],
    /// Print text to stdout as it is sampled (one prompt, not `--json`).
    stream: bool,
    /// The chat template's source (`--chat`): an answer in harmony
    /// (gpt-oss) is read by its channels, one with think tags by them, its
    /// reasoning on stderr and out of the text.
    template: Option<String>,
}

impl Generation {
    fn timings(&self, prompt_tokens: usize, load_s: f64) -> Timings {
        let end = self.finished.map_or_else(Instant::now, |(t, _)| t);
        let first = self.first_token.unwrap_or(end);
        let ttft = first.duration_since(self.submitted).as_secs_f64();
        let decode = end.duration_since(first);
        let after_first = self.output.len().saturating_sub(1);
        Timings {
            load_s,
            time_to_first_token_s: ttft,
            prefill_tokens_per_s: rate(prompt_tokens, first.duration_since(self.submitted)),
            decode_tokens_per_s: rate(after_first, decode),
        }
    }
}

fn rate(tokens: usize, time: Duration) -> f64 {
    let s = time.as_secs_f64();
    if s > 0.0 {
        tokens as f64 / s
    } else {
        0.0
    }
}

impl WithBackend for RunJob<'_> {
    /// Each prompt's generation, and the KV pool's bytes.
    type Output = Result<(Vec<Generation>, u64), CliError>;

    fn run<B>(self, backend: B) -> Self::Output
    where
        B: StepBackend,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let model = &self.model.model;
        let mut storage = EngineStorage::for_model(self.config, model, B::KV_GROUPS);
        let mut engine = Engine::new(model, backend, self.config, &mut storage)
            .map_err(|e| CliError::Engine(Box::new(e)))?;
        let kv_pool_bytes = engine.kv_bytes();
        let stop_tokens = self.model.tokenizer.end_of_generation().to_vec();
        let mut handles = Vec::with_capacity(self.prompts.len());
        let mut running = Vec::with_capacity(self.prompts.len());
        for (i, p) in self.prompts.iter().enumerate() {
            let request = GenRequest {
                tag: i as u64,
                prompt: p.ids.clone(),
                max_new_tokens: p.max_new_tokens,
                sampling: self.sampling.clone(),
                seed: self.seed.wrapping_add(i as u64),
                stop_tokens: stop_tokens.clone(),
            };
            let handle = engine
                .submit(request, Priority::Normal, engine.now())
                .map_err(CliError::Rejected)?;
            handles.push(Some(handle));
            let reader = match (&self.template, &p.rendered) {
                (Some(template), Some(rendered)) => Reader::of(template, rendered),
                _ => Reader::Plain,
            };
            running.push(Generation {
                stream: if reader.special() {
                    TextStream::with_special_tokens(self.stops)
                } else {
                    TextStream::new(self.stops)
                },
                reader,
                text: String::new(),
                output: Vec::new(),
                submitted: Instant::now(),
                first_token: None,
                finished: None,
            });
        }
        let mut stdout = std::io::stdout().lock();
        while !engine.is_idle() {
            engine.step().map_err(|e| CliError::Engine(Box::new(e)))?;
            for (slot, state) in handles.iter_mut().zip(running.iter_mut()) {
                let Some(handle) = slot else { continue };
                while let Some(event) = handle.try_recv() {
                    let Event::Token { token, .. } = event else {
                        self.terminal(event, state, &mut stdout)?;
                        *slot = None;
                        break;
                    };
                    if state.finished.is_some() {
                        continue; // after its stop string, before the cancel lands
                    }
                    state.first_token.get_or_insert_with(Instant::now);
                    state.output.push(token);
                    let piece = state.stream.push(&self.model.tokenizer, token);
                    self.emit(state, &piece.text, &mut stdout)?;
                    if piece.stopped {
                        state.finished = Some((Instant::now(), "stop_string"));
                        handle.cancel();
                    }
                }
            }
        }
        stdout.flush().map_err(CliError::Stdout)?;
        Ok((running, kv_pool_bytes))
    }
}

impl RunJob<'_> {
    /// Adds generated text to the request's and, when streaming, prints it.
    fn emit(
        &self,
        state: &mut Generation,
        text: &str,
        out: &mut impl Write,
    ) -> Result<(), CliError> {
        let pieces = state.reader.push(text);
        self.show(state, pieces, out)
    }

    /// Adds pieces of the answer to the request's text (and prints them
    /// when streaming); its reasoning goes to stderr.
    fn show(
        &self,
        state: &mut Generation,
        pieces: Vec<Piece>,
        out: &mut impl Write,
    ) -> Result<(), CliError> {
        for piece in pieces {
            match piece {
                Piece::Content(text) => {
                    state.text.push_str(&text);
                    if self.stream && !text.is_empty() {
                        write!(out, "{text}").map_err(CliError::Stdout)?;
                        out.flush().map_err(CliError::Stdout)?;
                    }
                }
                Piece::Reasoning(text) if self.stream => eprint!("{text}"),
                Piece::Reasoning(_) => {}
            }
        }
        Ok(())
    }

    /// A request's last event.
    fn terminal(
        &self,
        event: Event,
        state: &mut Generation,
        out: &mut impl Write,
    ) -> Result<(), CliError> {
        match event {
            Event::Finished(done) if state.finished.is_none() => {
                let rest = state.stream.finish();
                self.emit(state, &rest, out)?;
                let pieces = state.reader.finish();
                self.show(state, pieces, out)?;
                let why = match done.stop {
                    StopReason::StopToken => "end_of_generation",
                    StopReason::Length => "length",
                };
                state.finished = Some((Instant::now(), why));
                Ok(())
            }
            // Ended by its stop string, already recorded.
            Event::Finished(_)
            | Event::Cancelled
            | Event::Token { .. }
            | Event::PromptLogprobs(_) => Ok(()),
            Event::Rejected(reason) => Err(CliError::Rejected(reason)),
            Event::Failed => Err(CliError::Failed),
        }
    }
}
