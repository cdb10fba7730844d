//! `protos.Endorser` over gRPC: each proposal answered by
//! [`Endorser::answer`], or, when another organisation's weft Gateway
//! names the height its own peer had committed (the
//! [`COMMITTED_HEIGHT_HEADER`] request header), by
//! [`Endorser::answer_at_height`], whose refusal is `UNAVAILABLE` with
//! the height this peer has reached in the same header of the answer's
//! metadata ([`behind`] reads it). Fabric's Gateway sends no such header.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use weft_protos::protos::endorser_server::Endorser as EndorserRpc;
use weft_protos::protos::{ProposalResponse, SignedProposal};

use crate::{Behind, Endorser};

/// The request header in which a weft Gateway tells another
/// organisation's peer how many blocks of the proposal's channel its own
/// peer had committed when it asked for the endorsement (a decimal
/// number).
pub const COMMITTED_HEIGHT_HEADER: &str = "weft-committed-height";

/// The gRPC face of an [`Endorser`].
#[derive(Debug, Clone)]
pub struct EndorserService {
    endorser: Arc<Endorser>,
}

impl EndorserService {
    pub fn new(endorser: Arc<Endorser>) -> Self {
        Self { endorser }
    }
}

#[tonic::async_trait]
impl EndorserRpc for EndorserService {
    async fn process_proposal(
        &self,
        request: Request<SignedProposal>,
    ) -> Result<Response<ProposalResponse>, Status> {
        let height = request
            .metadata()
            .get(COMMITTED_HEIGHT_HEADER)
            .map(|value| {
                value
                    .to_str()
                    .ok()
                    .and_then(|text| text.parse::<u64>().ok())
            });
        let signed = request.into_inner();
        let answer = match height {
            None => self.endorser.answer(signed).await,
            Some(Some(height)) => match self.endorser.answer_at_height(signed, height).await {
                Ok(answer) => answer,
                Err(Behind { reached, asked }) => {
                    let mut refusal = Status::unavailable(format!(
                        "this peer has committed {reached} blocks of the channel, not yet the \
                         {asked} the asking Gateway's peer has"
                    ));
                    refusal
                        .metadata_mut()
                        .insert(COMMITTED_HEIGHT_HEADER, reached.into());
                    return Err(refusal);
                }
            },
            Some(None) => {
                tracing::info!(
                    "refused a proposal whose {COMMITTED_HEIGHT_HEADER} header is not a number"
                );
                return Err(Status::invalid_argument(format!(
                    "the {COMMITTED_HEIGHT_HEADER} header is not a block count"
                )));
            }
        };
        Ok(Response::new(answer))
    }
}

/// The height a peer refusing as [`Behind`] has reached, if `status` is
/// that refusal.
pub(crate) fn behind(status: &Status) -> Option<u64> {
    if status.code() != tonic::Code::Unavailable {
        return None;
    }
    status
        .metadata()
        .get(COMMITTED_HEIGHT_HEADER)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}
