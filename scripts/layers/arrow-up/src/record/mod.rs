pub fn touch() { let _ = crate::store::save; }
