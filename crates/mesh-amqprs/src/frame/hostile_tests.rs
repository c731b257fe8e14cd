//! mesh's fork: frames a peer may send that upstream's decoder panicked on are errors.

use super::{Error, Frame, FRAME_CONTENT_HEADER, FRAME_END, FRAME_METHOD};

/// A frame of `frame_type` on channel 1 with `payload`, then `trailing` bytes of what
/// follows in the buffer.
fn frame(frame_type: u8, payload: &[u8], trailing: usize) -> Vec<u8> {
    let mut buf = vec![frame_type, 0, 1];
    buf.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    buf.extend_from_slice(payload);
    buf.push(FRAME_END);
    buf.extend(std::iter::repeat_n(0, trailing));
    buf
}

fn corrupted(buf: &[u8]) {
    assert!(
        matches!(Frame::decode(buf), Err(Error::Corrupted)),
        "{buf:?}"
    );
}

#[test]
fn a_method_frame_too_short_for_its_header_is_corrupted() {
    corrupted(&frame(FRAME_METHOD, &[0, 10], 0));
    corrupted(&frame(FRAME_METHOD, &[], 0));
    // Followed by more bytes, so the header read alone would not run out of the buffer.
    corrupted(&frame(FRAME_METHOD, &[0, 10], 8));
}

#[test]
fn an_unknown_class_or_method_is_corrupted() {
    // class 999, method 1
    corrupted(&frame(FRAME_METHOD, &[3, 231, 0, 1], 0));
    // class 10 (connection), method 99
    corrupted(&frame(FRAME_METHOD, &[0, 10, 0, 99], 0));
}

#[test]
fn a_content_header_too_short_for_its_header_is_corrupted() {
    corrupted(&frame(FRAME_CONTENT_HEADER, &[0, 60, 0, 0], 0));
    corrupted(&frame(FRAME_CONTENT_HEADER, &[0, 60, 0, 0], 20));
}
