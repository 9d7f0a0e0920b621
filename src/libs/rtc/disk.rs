//! The on-disk kernel cache ([`crate::DeviceConfig::kernel_cache_dir`]): one file per key,
//! written atomically.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bumped whenever the on-disk format or the key's contents change.
pub(super) const DISK_FORMAT: &str = "cusched-kernel-cache-v1";

/// FNV-1a, 64-bit: a stable hash for cache file names (the full key is stored in the file and
/// compared, so a collision only costs a recompile).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

fn cache_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{:016x}.cubin", fnv1a(key.as_bytes())))
}

/// File layout: the key (length-prefixed, u64 LE), the lowered-name count (u64 LE), each name
/// pair as two length-prefixed strings, then the CUBIN.
pub(super) fn read_cached(dir: &Path, key: &str) -> Option<(Vec<u8>, HashMap<String, String>)> {
    let bytes = std::fs::read(cache_path(dir, key)).ok()?;
    let mut r = Cursor { bytes: &bytes, at: 0 };
    if r.chunk()? != key.as_bytes() {
        return None;
    }
    let count = r.len()?;
    let mut lowered = HashMap::new();
    for _ in 0..count {
        let name = String::from_utf8(r.chunk()?.to_vec()).ok()?;
        let low = String::from_utf8(r.chunk()?.to_vec()).ok()?;
        lowered.insert(name, low);
    }
    Some((bytes.get(r.at..)?.to_vec(), lowered))
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn len(&mut self) -> Option<usize> {
        usize::try_from(u64::from_le_bytes(self.take(8)?.try_into().ok()?)).ok()
    }

    fn chunk(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }
}

/// Writes the entry to a temporary file in `dir` and renames it into place, so a reader never
/// sees a partial file and concurrent writers of one key leave one whole copy.
pub(super) fn write_cached(
    dir: &Path,
    key: &str,
    cubin: &[u8],
    lowered: &HashMap<String, String>,
) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let mut out = Vec::with_capacity(key.len() + cubin.len() + 64);
    let put = |out: &mut Vec<u8>, b: &[u8]| {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    };
    put(&mut out, key.as_bytes());
    let mut names: Vec<_> = lowered.iter().collect();
    names.sort();
    out.extend_from_slice(&(names.len() as u64).to_le_bytes());
    for (name, low) in names {
        put(&mut out, name.as_bytes());
        put(&mut out, low.as_bytes());
    }
    out.extend_from_slice(cubin);
    let final_path = cache_path(dir, key);
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        final_path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, &out)?;
    std::fs::rename(&tmp, &final_path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
