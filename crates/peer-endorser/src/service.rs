//! `protos.Endorser` over gRPC: each proposal answered by
//! [`Endorser::answer`].

use std::sync::Arc;

use tonic::{Request, Response, Status};
use weft_protos::protos::endorser_server::Endorser as EndorserRpc;
use weft_protos::protos::{ProposalResponse, SignedProposal};

use crate::Endorser;

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
        Ok(Response::new(
            self.endorser.answer(request.into_inner()).await,
        ))
    }
}
