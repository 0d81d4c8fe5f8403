//! `pagoda chat`: an interactive multi-turn chat in the terminal, like
//! `llama-cli -cnv` or `ollama run`. Each line is a user turn; the answer
//! streams as it is sampled. The whole conversation goes through the chat
//! template every turn, on one engine, so the radix cache serves the
//! earlier turns and only the new ones are computed (the status line after
//! each answer says how many prompt tokens were cached). `/reset` starts
//! over (the system message stays), `/exit` or end of input quits, Ctrl-C
//! stops the current answer and keeps the chat. Works on stdin that is not
//! a terminal: each line is a turn, the answers go to stdout. A model's
//! reasoning (harmony's analysis channel, the text between think tags) goes
//! to stderr and stays out of the conversation.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use pagoda_engine::chat::ChatMessage;
use pagoda_engine::model::SamplingParams;
use pagoda_engine::{
    Engine, EngineConfig, EngineStorage, Event, GenRequest, Priority, SchedulerConfig, StepBackend,
    TextModel, TextStream, WithBackend,
};
use pagoda_server::harmony::Piece;

use crate::answer::Reader;

use crate::args::{BackendKind, TemplateArgs, WeightArgs};
use crate::error::CliError;

/// `pagoda chat`'s options.
#[derive(clap::Args)]
pub(crate) struct ChatArgs {
    /// The model: a GGUF file with a chat template.
    #[arg(long, value_name = "FILE.gguf")]
    model: PathBuf,
    /// A system message at the start of the conversation.
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per answer (the context also bounds it).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: u32,
    /// Sampling temperature (0: greedy).
    #[arg(long, default_value_t = 0.7)]
    temperature: f32,
    /// Sample from the smallest set of tokens with this much probability.
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Drop tokens less likely than this times the most likely one.
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    weights: WeightArgs,
    #[command(flatten)]
    template: TemplateArgs,
    /// Attention backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Cpu)]
    backend: BackendKind,
    /// Threads for attention and matrix products (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Pages in the KV pool, 16 tokens each (default: the model's whole
    /// context, which the conversation and its cached turns share).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16_000_000))]
    kv_pages: Option<u32>,
}

/// Set by Ctrl-C; the answer being written stops at the next step.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Turns Ctrl-C into [`INTERRUPTED`] (on a thread of its own, with a
/// one-thread runtime for tokio's signal handling) instead of ending the
/// process.
fn catch_ctrl_c() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    if let Ok(runtime) = runtime {
        std::thread::spawn(move || {
            runtime.block_on(async {
                while tokio::signal::ctrl_c().await.is_ok() {
                    INTERRUPTED.store(true, Ordering::SeqCst);
                }
            })
        });
    }
}

pub(crate) fn chat(args: ChatArgs) -> Result<(), CliError> {
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_p: args.top_p,
        min_p: args.min_p,
        ..SamplingParams::GREEDY
    };
    sampling.validate()?;
    let started = Instant::now();
    let mut model =
        crate::open_chat_model(&args.model, &args.weights, &args.template, args.backend)?;
    crate::template_of(&model)?;
    let interactive = std::io::stdin().is_terminal();
    eprintln!(
        "pagoda chat: {} ({}) loaded in {:.2} s{}",
        args.model.display(),
        model.info.architecture,
        started.elapsed().as_secs_f64(),
        if interactive {
            "; /reset starts over, /exit quits, Ctrl-C stops an answer"
        } else {
            ""
        }
    );
    if let Some(used) = &model.info.repack_cache {
        eprintln!("pagoda chat: {used}");
    }
    catch_ctrl_c();
    // One sequence at a time, with its whole context in the pool: the
    // next turn extends the pages the radix cache kept of the last.
    let context = model.model.config().max_context;
    let config = EngineConfig {
        kv_pages: args.kv_pages.unwrap_or(context.div_ceil(16) + 4),
        scheduler: SchedulerConfig {
            max_batch: 1,
            ..SchedulerConfig::default()
        },
        ..EngineConfig::default()
    };
    let job = ChatJob {
        model: &model,
        config: &config,
        args: &args,
        sampling,
        interactive,
    };
    let backend = args.backend.choice(args.threads);
    let chatted = backend.open(job).map_err(|error| CliError::Backend {
        name: backend.name(),
        error,
    })?;
    // A cache file still being written is finished before exit.
    if let Some(pagoda_engine::model::RepackCacheUse::Writing { .. }) = &model.info.repack_cache {
        eprintln!("pagoda chat: finishing the repack cache");
        if let Some(used) = model.wait_for_repack_cache() {
            eprintln!("pagoda chat: {used}");
        }
    }
    chatted
}

struct ChatJob<'a> {
    model: &'a TextModel,
    config: &'a EngineConfig,
    args: &'a ChatArgs,
    sampling: SamplingParams,
    interactive: bool,
}

impl WithBackend for ChatJob<'_> {
    type Output = Result<(), CliError>;

    fn run<B>(self, backend: B) -> Self::Output
    where
        B: StepBackend,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let model = &self.model.model;
        let context = model.config().max_context;
        let mut storage = EngineStorage::for_model(self.config, model, B::KV_GROUPS);
        let mut engine = Engine::new(model, backend, self.config, &mut storage)
            .map_err(|e| CliError::Engine(Box::new(e)))?;
        let template = crate::template_of(self.model)?;
        let tokenizer = &self.model.tokenizer;
        let stop_tokens = tokenizer.end_of_generation().to_vec();
        let start: Vec<ChatMessage> = self
            .args
            .system
            .iter()
            .map(|s| ChatMessage {
                role: "system".into(),
                content: s.clone(),
            })
            .collect();
        let mut messages = start.clone();
        let stdin = std::io::stdin();
        let mut stdout = std::io::stdout().lock();
        let mut turn = 0u64;
        loop {
            if self.interactive {
                eprint!("> ");
            }
            let mut line = String::new();
            if stdin.lock().read_line(&mut line).map_err(CliError::Stdin)? == 0 {
                break;
            }
            INTERRUPTED.store(false, Ordering::SeqCst);
            let line = line.trim_end_matches(['\n', '\r']);
            match line.trim() {
                "" => continue,
                "/exit" | "/quit" => break,
                "/reset" => {
                    messages = start.clone();
                    eprintln!("pagoda chat: the conversation starts over");
                    continue;
                }
                _ => {}
            }
            messages.push(ChatMessage {
                role: "user".into(),
                content: line.to_string(),
            });
            let rendered = template.render(&messages, true)?;
            let prompt = tokenizer.encode(&rendered, false, true);
            let room = context.saturating_sub(prompt.len() as u32);
            if room == 0 {
                messages.pop();
                eprintln!(
                    "pagoda chat: the conversation fills the {context}-token context; /reset to start over"
                );
                continue;
            }
            let request = GenRequest {
                tag: turn,
                prompt: prompt.clone(),
                max_new_tokens: self.args.max_tokens.min(room),
                sampling: self.sampling.clone(),
                seed: self.args.seed.wrapping_add(turn),
                stop_tokens: stop_tokens.clone(),
            };
            turn += 1;
            let submitted = Instant::now();
            let handle = engine
                .submit(request, Priority::Normal, engine.now())
                .map_err(CliError::Rejected)?;
            // A harmony answer (gpt-oss) is read by its channels, and a
            // thinking model's between its think tags: the reasoning goes
            // to stderr, the answer to stdout and the conversation.
            let mut reader = Reader::of(template.source(), &rendered);
            let mut stream = if reader.special() {
                TextStream::with_special_tokens(&[])
            } else {
                TextStream::new(&[])
            };
            let (mut answer, mut first, mut tokens, mut cached) = (String::new(), None, 0, 0);
            let mut thought = String::new();
            let mut stopped = false;
            while !engine.is_idle() {
                if INTERRUPTED.swap(false, Ordering::SeqCst) && !stopped {
                    handle.cancel();
                    stopped = true;
                }
                engine.step().map_err(|e| CliError::Engine(Box::new(e)))?;
                while let Some(event) = handle.try_recv() {
                    match event {
                        Event::Token { token, .. } => {
                            first.get_or_insert_with(Instant::now);
                            tokens += 1;
                            let piece = stream.push(tokenizer, token);
                            let pieces = reader.push(&piece.text);
                            show(pieces, &mut answer, &mut thought, &mut stdout)?;
                        }
                        Event::PromptLogprobs(_) => {}
                        Event::Finished(done) => {
                            cached = done.cached_tokens;
                            let rest = stream.finish();
                            let mut pieces = reader.push(&rest);
                            pieces.extend(reader.finish());
                            show(pieces, &mut answer, &mut thought, &mut stdout)?;
                        }
                        Event::Cancelled => {}
                        Event::Rejected(reason) => return Err(CliError::Rejected(reason)),
                        Event::Failed => return Err(CliError::Failed),
                    }
                }
            }
            writeln!(stdout).map_err(CliError::Stdout)?;
            stdout.flush().map_err(CliError::Stdout)?;
            // The status line on a line of its own after the reasoning.
            if !thought.is_empty() && !thought.ends_with('\n') {
                eprintln!();
            }
            // The answer so far stays in the conversation, stopped or not.
            messages.push(ChatMessage {
                role: "assistant".into(),
                content: answer,
            });
            let ttft = first.map_or(0.0, |t| t.duration_since(submitted).as_secs_f64());
            eprintln!(
                "[{tokens} tokens{}; first after {ttft:.3} s; {cached} of {} prompt tokens cached]",
                if stopped { ", stopped" } else { "" },
                prompt.len(),
            );
        }
        Ok(())
    }
}

/// Prints an answer's pieces as they come: its text to `out` (and the
/// answer), its reasoning to stderr.
fn show(
    pieces: Vec<Piece>,
    answer: &mut String,
    thought: &mut String,
    out: &mut impl Write,
) -> Result<(), CliError> {
    for piece in pieces {
        match piece {
            Piece::Content(text) => {
                answer.push_str(&text);
                write!(out, "{text}").map_err(CliError::Stdout)?;
            }
            Piece::Reasoning(text) => {
                thought.push_str(&text);
                eprint!("{text}");
            }
        }
    }
    out.flush().map_err(CliError::Stdout)
}
