use std::collections::HashMap;
fn main() { let mut m = HashMap::new(); for i in 0..2_000_000u64 { m.insert(i, format!("v{i}")); } let s: u64 = m.iter().map(|(k, v)| k ^ v.len() as u64).sum(); println!("{s}"); }
