//! The limits every store applies before it is touched, whatever its
//! backend: a guest asking for more gets `error::other` naming the limit.

/// The longest key, in bytes.
pub(crate) const MAX_KEY: usize = 4096;
/// The largest value, in bytes.
pub(crate) const MAX_VALUE: usize = 16 << 20;
/// The most keys one `get-many`, `set-many` or `delete-many` names.
pub(crate) const MAX_BATCH: usize = 1000;
/// The most bytes one `set-many` writes.
pub(crate) const MAX_BATCH_BYTES: usize = 64 << 20;
/// The most keys one `list-keys` page holds; the page's cursor leads on.
pub(crate) const LIST_PAGE: usize = 1000;

pub(crate) fn check_key(key: &str) -> Result<(), String> {
    if key.len() > MAX_KEY {
        return Err(format!(
            "a key of {} bytes is over the limit of {MAX_KEY}",
            key.len()
        ));
    }
    Ok(())
}

pub(crate) fn check_value(len: usize) -> Result<(), String> {
    if len > MAX_VALUE {
        return Err(format!(
            "a value of {len} bytes is over the limit of {MAX_VALUE}"
        ));
    }
    Ok(())
}

pub(crate) fn check_batch(n: usize) -> Result<(), String> {
    if n > MAX_BATCH {
        return Err(format!(
            "{n} keys in one call is over the limit of {MAX_BATCH}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_is_inclusive_and_named() {
        assert!(check_key(&"k".repeat(MAX_KEY)).is_ok());
        assert!(check_key(&"k".repeat(MAX_KEY + 1))
            .unwrap_err()
            .contains("4096"));
        assert!(check_value(MAX_VALUE).is_ok());
        assert!(check_value(MAX_VALUE + 1).is_err());
        assert!(check_batch(MAX_BATCH).is_ok());
        assert!(check_batch(MAX_BATCH + 1).is_err());
    }
}
