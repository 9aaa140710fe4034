//! A one-line progress display for long fetches, on stderr, only when stderr is a terminal:
//! which source is being fetched and for how long, redrawn a few times a second. On a pipe or
//! in a log file it prints nothing, so scripted output stays clean.

use std::io::{IsTerminal as _, Write as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::preview::FetchEvent;

/// What the ticker draws: the current source and when it started.
#[derive(Default)]
struct State {
    current: Option<(String, Instant)>,
    done: bool,
}

/// A progress display; [`Progress::event`] feeds it, dropping it clears the line.
pub struct Progress {
    state: Option<Arc<Mutex<State>>>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    /// A display on stderr when it is a terminal, else a no-op.
    pub fn stderr() -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress {
                state: None,
                ticker: None,
            };
        }
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        // A plain thread: the display must keep ticking while the runtime is busy fetching.
        let ticker = std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(200));
            let guard = shared.lock().unwrap_or_else(|p| p.into_inner());
            if guard.done {
                eprint!("\r\x1b[2K");
                return;
            }
            if let Some((label, started)) = &guard.current {
                eprint!("\r\x1b[2K{label} … {:.1}s", started.elapsed().as_secs_f64());
                let _ = std::io::stderr().flush();
            }
        });
        Progress {
            state: Some(state),
            ticker: Some(ticker),
        }
    }

    /// Records a fetch event.
    pub fn event(&self, event: FetchEvent) {
        let Some(state) = &self.state else {
            return;
        };
        let mut guard = state.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            FetchEvent::Started {
                index,
                total,
                label,
            } => {
                // Drawn at once, then redrawn by the ticker with the time spent so far.
                let line = format!(
                    "fetching [{}/{total}] {}",
                    index + 1,
                    super::terminal::escape(&label)
                );
                eprint!("\r\x1b[2K{line} …");
                let _ = std::io::stderr().flush();
                guard.current = Some((line, Instant::now()))
            }
            FetchEvent::Finished { .. } => guard.current = None,
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(state) = &self.state {
            state.lock().unwrap_or_else(|p| p.into_inner()).done = true;
        }
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}
