//! `protos.Endorser` over gRPC. Each proposal is checked, simulated and
//! signed on the blocking pool, so that signature work never stalls the
//! runtime serving other requests.

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
        let endorser = self.endorser.clone();
        let signed = request.into_inner();
        tokio::task::spawn_blocking(move || endorser.process_proposal(&signed))
            .await
            .map(Response::new)
            .map_err(|e| Status::internal(format!("the endorsement task failed: {e}")))
    }
}
