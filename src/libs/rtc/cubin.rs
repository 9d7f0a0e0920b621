//! The parameter layouts a CUBIN records for its kernels, read from its ELF `.nv.info.<kernel>`
//! sections, so that a kernel lookup knows how many parameters to ask the driver about
//! without asking past the last one (see [`cuda::module::param_sizes`]).
//!
//! The attribute records are not a documented format. Nothing here is trusted on its own: the
//! driver confirms every offset read here, and the end of the last parameter, before the count
//! is used; any record or section this parser does not understand leaves the kernel out, and
//! its lookup falls back to the driver alone.

use crate::backend::cuda;
use std::collections::HashMap;

/// `EIATTR_KPARAM_INFO`: one record per parameter (its ordinal and byte offset).
const KPARAM_INFO: u8 = 0x17;
/// `EIATTR_CBANK_PARAM_SIZE`: the bytes the parameters take, up to the end of the last.
const CBANK_PARAM_SIZE: u8 = 0x19;
/// `EIATTR_KPARAM_INFO_V2`: a newer per-parameter record whose layout this parser does not read;
/// a kernel that has one is left out.
const KPARAM_INFO_V2: u8 = 0x45;
/// Record formats: no value, a byte, a half-word (each 4 bytes in all), and a sized value
/// (a half-word length, then that many bytes).
const FMT_NVAL: u8 = 1;
const FMT_HVAL: u8 = 3;
const FMT_SVAL: u8 = 4;

/// Each kernel's parameter layout, by symbol (the lowered name), for the kernels whose records
/// this parser understands. A CUBIN it cannot read at all gives an empty map.
pub(super) fn param_layouts(cubin: &[u8]) -> HashMap<String, cuda::module::ParamLayout> {
    let mut out = HashMap::new();
    let Some(sections) = sections(cubin) else { return out };
    for (name, data) in sections {
        if let Some(kernel) = name.strip_prefix(".nv.info.") {
            if let Some(layout) = layout(data) {
                out.insert(kernel.to_owned(), layout);
            }
        }
    }
    out
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

fn usize_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64_at(b, at)?).ok()
}

/// The name and contents of every section of a little-endian ELF64 image, or `None` when the
/// image is not one or a header points outside it.
fn sections(elf: &[u8]) -> Option<Vec<(&str, &[u8])>> {
    // Magic, 64-bit class, little-endian data.
    if elf.get(0..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = usize_at(elf, 0x28)?;
    let shentsize = usize::from(u16_at(elf, 0x3a)?);
    let shnum = usize::from(u16_at(elf, 0x3c)?);
    let shstrndx = usize::from(u16_at(elf, 0x3e)?);
    if shentsize < 0x28 || shstrndx >= shnum {
        return None;
    }
    let header = |i: usize| -> Option<(u32, &[u8])> {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let name = u32_at(elf, at)?;
        let offset = usize_at(elf, at.checked_add(0x18)?)?;
        let size = usize_at(elf, at.checked_add(0x20)?)?;
        Some((name, elf.get(offset..offset.checked_add(size)?)?))
    };
    let (_, names) = header(shstrndx)?;
    let mut out = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let (name_at, data) = header(i)?;
        let name = names.get(usize::try_from(name_at).ok()?..)?;
        let end = name.iter().position(|&c| c == 0)?;
        out.push((std::str::from_utf8(&name[..end]).ok()?, data));
    }
    Some(out)
}

/// The layout in one kernel's attribute records: parameter offsets by ordinal (every ordinal
/// from 0 present once) and the end of the last parameter.
fn layout(records: &[u8]) -> Option<cuda::module::ParamLayout> {
    let mut params: Vec<(u16, u16)> = Vec::new();
    let mut end = None;
    let mut at = 0usize;
    while at < records.len() {
        let format = *records.get(at)?;
        let attribute = *records.get(at + 1)?;
        if attribute == KPARAM_INFO_V2 {
            return None;
        }
        match format {
            FMT_SVAL => {
                let len = usize::from(u16_at(records, at + 2)?);
                let value = records.get(at + 4..(at + 4).checked_add(len)?)?;
                if attribute == KPARAM_INFO {
                    // A 32-bit index, then the 16-bit ordinal and 16-bit offset.
                    params.push((u16_at(value, 4)?, u16_at(value, 6)?));
                }
                at += 4 + len;
            }
            FMT_NVAL..=FMT_HVAL => {
                if attribute == CBANK_PARAM_SIZE {
                    if format != FMT_HVAL {
                        return None;
                    }
                    end = Some(usize::from(u16_at(records, at + 2)?));
                }
                at += 4;
            }
            _ => return None,
        }
    }
    params.sort_unstable();
    let mut offsets = Vec::with_capacity(params.len());
    for (i, &(ordinal, offset)) in params.iter().enumerate() {
        if usize::from(ordinal) != i {
            return None;
        }
        offsets.push(usize::from(offset));
    }
    Some(cuda::module::ParamLayout { offsets, end })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sval(attribute: u8, value: &[u8]) -> Vec<u8> {
        let mut r = vec![FMT_SVAL, attribute];
        r.extend_from_slice(&(value.len() as u16).to_le_bytes());
        r.extend_from_slice(value);
        r
    }

    fn kparam(ordinal: u16, offset: u16) -> Vec<u8> {
        let mut v = vec![0u8; 4];
        v.extend_from_slice(&ordinal.to_le_bytes());
        v.extend_from_slice(&offset.to_le_bytes());
        v.extend_from_slice(&[0x00, 0xf0, 0x21, 0x00]);
        sval(KPARAM_INFO, &v)
    }

    /// A minimal ELF64 image with the given sections (a null section, then each, then the
    /// section-name table).
    fn elf(sections: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut names = vec![0u8];
        let mut body = Vec::new();
        let mut headers = vec![[0u64; 8]];
        for (name, data) in
            sections.iter().map(|(n, d)| (n.to_string(), d.clone())).chain([(".shstrtab".to_string(), Vec::new())])
        {
            let name_at = names.len() as u64;
            names.extend_from_slice(name.as_bytes());
            names.push(0);
            headers.push([name_at, 0, 0, 0x40 + body.len() as u64, data.len() as u64, 0, 0, 0]);
            body.extend_from_slice(&data);
        }
        let last = headers.len() - 1;
        headers[last][3] = 0x40 + body.len() as u64;
        headers[last][4] = names.len() as u64;
        body.extend_from_slice(&names);
        let shoff = 0x40 + body.len() as u64;
        let mut out = vec![0u8; 0x40];
        out[..6].copy_from_slice(b"\x7fELF\x02\x01");
        out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        out[0x3c..0x3e].copy_from_slice(&(headers.len() as u16).to_le_bytes());
        out[0x3e..0x40].copy_from_slice(&(last as u16).to_le_bytes());
        out.extend_from_slice(&body);
        for h in headers {
            let mut raw = [0u8; 64];
            raw[0..4].copy_from_slice(&(h[0] as u32).to_le_bytes());
            raw[0x18..0x20].copy_from_slice(&h[3].to_le_bytes());
            raw[0x20..0x28].copy_from_slice(&h[4].to_le_bytes());
            out.extend_from_slice(&raw);
        }
        out
    }

    #[test]
    fn reads_offsets_by_ordinal_and_the_end() {
        // Records in the order NVRTC 13.0 writes them for `k(float*, int, double, char)`:
        // the last parameter first.
        let mut records = sval(0x37, &[0x82, 0, 0, 0]);
        for (ordinal, offset) in [(3, 24), (2, 16), (1, 8), (0, 0)] {
            records.extend(kparam(ordinal, offset));
        }
        records.extend([FMT_HVAL, 0x50, 0, 0, FMT_HVAL, 0x1b, 0xff, 0]);
        records.extend([FMT_HVAL, CBANK_PARAM_SIZE, 25, 0]);
        records.extend([FMT_NVAL, 0x2a, 0, 0]);
        records.extend(sval(0x1c, &[0x40, 0, 0, 0, 0x30, 1, 0, 0]));
        let image = elf(&[(".nv.info", vec![]), (".nv.info.k", records), (".nv.info.none", sval(0x37, &[0; 4]))]);
        let layouts = param_layouts(&image);
        let k = &layouts["k"];
        assert_eq!(k.offsets, [0, 8, 16, 24]);
        assert_eq!(k.end, Some(25));
        let none = &layouts["none"];
        assert!(none.offsets.is_empty());
        assert_eq!(none.end, None);
    }

    #[test]
    fn leaves_out_what_it_cannot_read() {
        let gap = [kparam(0, 0), kparam(2, 16)].concat();
        let twice = [kparam(0, 0), kparam(0, 0)].concat();
        let v2 = [kparam(0, 0), sval(KPARAM_INFO_V2, &[0; 12])].concat();
        let unknown_format = vec![9, 0x17, 0, 0];
        let truncated = kparam(0, 0)[..9].to_vec();
        let image = elf(&[
            (".nv.info.gap", gap),
            (".nv.info.twice", twice),
            (".nv.info.v2", v2),
            (".nv.info.unknown", unknown_format),
            (".nv.info.truncated", truncated),
        ]);
        assert!(param_layouts(&image).is_empty());
        for bad in [&b""[..], b"\x7fELF\x01\x01", &image[..0x30], &image[..image.len() - 1]] {
            assert!(param_layouts(bad).is_empty());
        }
    }
}
