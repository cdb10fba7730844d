//! gRPC calls with raw bytes on the wire, to send what a Fabric client's
//! codec never would: bytes that are not the method's message, a message
//! over the server's size limit.

// Each test crate that includes this module uses a part of it.
#![allow(dead_code)]

use bytes::Bytes;
use tonic::transport::Channel;

/// The most a raw call sends: enough to pass any node's size limit.
const SEND_BYTES_MAX: usize = 128 << 20;

/// Sends `requests` as they are on one call of the streaming `method`;
/// the answers, and the status the stream ended with if it ended with an
/// error.
pub async fn streaming(
    channel: Channel,
    method: &'static str,
    requests: Vec<Bytes>,
) -> (Vec<Bytes>, Option<tonic::Status>) {
    let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(SEND_BYTES_MAX);
    grpc.ready().await.expect("the connection is ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
    let request = tonic::Request::new(tokio_stream::iter(requests));
    let mut answers = Vec::new();
    let mut stream = match grpc.streaming(request, path, RawCodec).await {
        Ok(response) => response.into_inner(),
        Err(status) => return (answers, Some(status)),
    };
    loop {
        match stream.message().await {
            Ok(Some(bytes)) => answers.push(bytes),
            Ok(None) => return (answers, None),
            Err(status) => return (answers, Some(status)),
        }
    }
}

/// Sends `request` as it is to the unary `method`.
pub async fn unary(
    channel: Channel,
    method: &'static str,
    request: Bytes,
) -> Result<Bytes, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(SEND_BYTES_MAX);
    grpc.ready().await.expect("the connection is ready");
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(method);
    grpc.unary(tonic::Request::new(request), path, RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

/// A gRPC codec of raw bytes.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put(dst, item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(bytes::Buf::copy_to_bytes(
            src,
            bytes::Buf::remaining(src),
        )))
    }
}
