pub fn main(_args: crate::cli::RunArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
