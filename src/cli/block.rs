//! `weft block inspect`.

use std::path::Path;

use anyhow::{Context, Result};

/// Prints the block in `file` as JSON with every nested layer decoded.
pub fn inspect(file: &Path) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let json = weft_protos::json::to_json("common.Block", &bytes)
        .with_context(|| format!("{}: not a Fabric block", file.display()))?;
    let text = serde_json::to_string_pretty(&json).context("rendering JSON")?;
    println!("{text}");
    Ok(())
}
