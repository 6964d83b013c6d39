//! Minimal argument handling: positionals and `--name value` options.

use std::collections::VecDeque;

#[derive(Debug)]
pub struct Args {
    rest: VecDeque<String>,
}

impl Args {
    pub fn from_env() -> Self {
        Args {
            rest: std::env::args().skip(1).collect(),
        }
    }

    /// The next argument that is not an option.
    pub fn next_positional(&mut self) -> Option<String> {
        let i = self.positional_index()?;
        self.rest.remove(i)
    }

    fn positional_index(&self) -> Option<usize> {
        let mut i = 0;
        while i < self.rest.len() {
            if self.rest[i].starts_with("--") {
                i += 2;
            } else {
                return Some(i);
            }
        }
        None
    }

    /// All remaining positionals.
    pub fn positionals(&mut self) -> Vec<String> {
        std::iter::from_fn(|| self.next_positional()).collect()
    }

    /// The value of `--name`, if given.
    pub fn option(&mut self, name: &str) -> Option<String> {
        let flag = format!("--{name}");
        let i = self.rest.iter().position(|a| *a == flag)?;
        self.rest.remove(i);
        self.rest.remove(i)
    }

    pub fn required(&mut self, name: &str) -> Result<String, String> {
        self.option(name)
            .ok_or_else(|| format!("--{name} is required"))
    }

    pub fn parsed<T: std::str::FromStr>(&mut self, name: &str, default: T) -> Result<T, String> {
        match self.option(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: cannot parse {v:?}")),
        }
    }
}
