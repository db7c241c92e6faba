//! The cluster key shared by gctld and gnoded (a 0600 file).

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, Result};

/// `n` random bytes from the operating system, as hex: cluster and job keys.
pub fn random_hex(n: usize) -> Result<String> {
    let mut bytes = vec![0u8; n];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| anyhow::anyhow!("no randomness for a key: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Reads the key, creating a random one (mode 0600) if the file is missing.
pub fn load_or_create(path: &Path) -> Result<String> {
    if !path.exists() {
        let key = random_hex(32)?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot create cluster key file {}", path.display()))?;
        writeln!(f, "{key}").with_context(|| format!("cannot write {}", path.display()))?;
    }
    read(path)
}

/// Reads and checks an existing key file.
pub fn read(path: &Path) -> Result<String> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read cluster key file {}", path.display()))?;
    let contents = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read cluster key file {}", path.display()))?;
    Ok(gsched_core::wire::check_key_file(
        &path.display().to_string(),
        meta.permissions().mode(),
        &contents,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_key_is_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("cluster.key");
        let a = load_or_create(&p).unwrap();
        assert_eq!(a.len(), 64);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(load_or_create(&p).unwrap(), a);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(read(&p)
            .unwrap_err()
            .to_string()
            .contains("can be read by other users"));
    }
}
