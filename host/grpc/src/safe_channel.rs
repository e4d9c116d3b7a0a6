//! A channel to a peer whose answers tonic's client reads without
//! panicking.
//!
//! tonic parses a gRPC status's details (`grpc-status-details-bin`) with an
//! `expect`: details that are not base64, from whatever answers at a peer's
//! address, panicked the task that made the call. For a peer lane that task
//! is the lane itself: it ended, and the node went on without ever sending
//! to that peer again. Wasmraft's calls never use status details, so this
//! channel drops them from every answer, in its headers and its trailers,
//! before tonic looks.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::Service;
use tonic::codegen::http::{HeaderMap, Request, Response};
use tonic::transport::Channel;

/// The header tonic would parse with a panic.
const STATUS_DETAILS: &str = "grpc-status-details-bin";

/// [`Channel`], with status details dropped from every answer.
#[derive(Clone, Debug)]
pub(crate) struct SafeChannel(pub(crate) Channel);

impl Service<Request<Body>> for SafeChannel {
    type Response = Response<WithoutDetails>;
    type Error = tonic::transport::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let answer = self.0.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            strip(response.headers_mut());
            Ok(response.map(WithoutDetails))
        })
    }
}

fn strip(headers: &mut HeaderMap) {
    headers.remove(STATUS_DETAILS);
}

/// An answer's body, with status details dropped from its trailers.
#[derive(Debug)]
pub(crate) struct WithoutDetails(Body);

impl http_body::Body for WithoutDetails {
    type Data = <Body as http_body::Body>::Data;
    type Error = <Body as http_body::Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.0).poll_frame(cx).map_ok(|mut frame| {
            if let Some(trailers) = frame.trailers_mut() {
                strip(trailers);
            }
            frame
        })
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.0.size_hint()
    }
}
