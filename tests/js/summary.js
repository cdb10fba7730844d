// summary.js: the code produce.js and consume.js share for the Fabric wire-compatibility test.
//
// It decodes each of the five test messages, layer by layer (every `bytes` field that holds another
// serialized message is decoded as well), using Fabric's own generated JavaScript protobufs from
// @hyperledger/fabric-protos. It then reduces the decoded layers to a small `summary` object, which
// the Rust side of the test checks against weft's prost types. It also holds the two hashes
// Fabric computes outside protobuf: the transaction id and the block header hash.
'use strict';

const crypto = require('node:crypto');
const path = require('node:path');
const { common, peer, msp, orderer, ledger } = require('@hyperledger/fabric-protos');

const { rwset } = ledger;
const { kvrwset } = rwset;

// google.protobuf.Timestamp. google-protobuf is a dependency of fabric-protos, not of this
// package, so it is resolved from fabric-protos' own location to get the very copy it uses.
const fabricProtosDir = path.dirname(require.resolve('@hyperledger/fabric-protos/package.json'));
const { Timestamp } = require(
  require.resolve('google-protobuf/google/protobuf/timestamp_pb.js', { paths: [fabricProtosDir] }),
);

/** The test messages, in the order they are produced and reported. */
const NAMES = ['signed_proposal', 'proposal_response', 'endorser_tx_envelope', 'config_envelope', 'block'];

// ---------------------------------------------------------------------------------------------
// Small helpers

const toBuffer = (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
const hex = (bytes) => toBuffer(bytes).toString('hex');
const utf8 = (bytes) => toBuffer(bytes).toString('utf8');
const sha256 = (...parts) => crypto.createHash('sha256').update(Buffer.concat(parts.map(toBuffer))).digest();

function need(value, what) {
  if (value === undefined || value === null) throw new Error(`missing ${what}`);
  return value;
}

/** The entries of a google-protobuf map as [key, value] pairs (it iterates in sorted key order). */
function mapEntries(map) {
  const entries = [];
  map.forEach((value, key) => entries.push([key, value]));
  return entries;
}

// ---------------------------------------------------------------------------------------------
// Fabric's hashes

/** Fabric's transaction id: hex(SHA-256(nonce ‖ creator)), creator = serialized SerializedIdentity. */
function computeTxId(nonce, creator) {
  return sha256(nonce, creator).toString('hex');
}

/** DER length octets: short form below 128, long form otherwise. */
function derLength(length) {
  if (length < 0x80) return Buffer.from([length]);
  const octets = [];
  for (let n = length; n > 0; n = Math.floor(n / 256)) octets.unshift(n % 256);
  return Buffer.from([0x80 | octets.length, ...octets]);
}

function derTlv(tag, content) {
  return Buffer.concat([Buffer.from([tag]), derLength(content.length), content]);
}

/** DER INTEGER: minimal big-endian two's complement (so 0x00 is prepended when the top bit is set). */
function derInteger(value) {
  let n = BigInt(value);
  const octets = [];
  for (;;) {
    octets.unshift(Number(n & 0xffn));
    n >>= 8n; // arithmetic shift: a negative value tends to -1
    const topBitSet = (octets[0] & 0x80) !== 0;
    if ((n === 0n && !topBitSet) || (n === -1n && topBitSet)) break;
  }
  return derTlv(0x02, Buffer.from(octets));
}

/** Fabric's block header hash: SHA-256 of DER SEQUENCE { INTEGER number, OCTET STRING previous_hash, OCTET STRING data_hash }. */
function blockHeaderHash(number, previousHash, dataHash) {
  const sequence = derTlv(0x30, Buffer.concat([
    derInteger(number),
    derTlv(0x04, toBuffer(previousHash)),
    derTlv(0x04, toBuffer(dataHash)),
  ]));
  return sha256(sequence);
}

/** Fabric's block data hash: SHA-256 of the data entries concatenated. */
function blockDataHash(dataList) {
  return sha256(...dataList);
}

// ---------------------------------------------------------------------------------------------
// Decoding, layer by layer
//
// A decoder fills `layers` (a name for each decoded message -> the message) and `sources` (the same
// name -> the bytes it was decoded from, so a caller can check that re-encoding gives them back).
// The first layer is always the whole message.

class Layers {
  constructor() {
    this.layers = {};
    this.sources = {};
  }

  /** Decode `bytes` as `Class`, record it under `name`, and return it. */
  take(name, Class, bytes) {
    const message = Class.deserializeBinary(need(bytes, name));
    this.layers[name] = message;
    this.sources[name] = bytes;
    return message;
  }
}

function decodeHeaderLayers(d, prefix, header) {
  const channelHeader = d.take(`${prefix}channelHeader`, common.ChannelHeader, header.getChannelHeader_asU8());
  if (channelHeader.getType() === common.HeaderType.ENDORSER_TRANSACTION && channelHeader.getExtension_asU8().length > 0) {
    d.take(`${prefix}chaincodeHeaderExtension`, peer.ChaincodeHeaderExtension, channelHeader.getExtension_asU8());
  }
  const signatureHeader = d.take(`${prefix}signatureHeader`, common.SignatureHeader, header.getSignatureHeader_asU8());
  d.take(`${prefix}creator`, msp.SerializedIdentity, signatureHeader.getCreator_asU8());
}

function decodeProposalPayloadLayers(d, prefix, bytes) {
  const proposalPayload = d.take(`${prefix}proposalPayload`, peer.ChaincodeProposalPayload, bytes);
  d.take(`${prefix}invocationSpec`, peer.ChaincodeInvocationSpec, proposalPayload.getInput_asU8());
}

function decodeProposalResponsePayloadLayers(d, prefix, bytes) {
  const responsePayload = d.take(`${prefix}proposalResponsePayload`, peer.ProposalResponsePayload, bytes);
  const action = d.take(`${prefix}chaincodeAction`, peer.ChaincodeAction, responsePayload.getExtension_asU8());
  const results = d.take(`${prefix}results`, rwset.TxReadWriteSet, action.getResults_asU8());
  results.getNsRwsetList().forEach((ns, i) => {
    d.take(`${prefix}results.nsRwset[${i}].rwset`, kvrwset.KVRWSet, ns.getRwset_asU8());
  });
  if (action.getEvents_asU8().length > 0) {
    d.take(`${prefix}events`, peer.ChaincodeEvent, action.getEvents_asU8());
  }
}

function decodeEndorsementLayers(d, prefix, endorsements) {
  endorsements.forEach((endorsement, j) => {
    d.take(`${prefix}endorsements[${j}].endorser`, msp.SerializedIdentity, endorsement.getEndorser_asU8());
  });
}

function decodeSignedProposal(d, bytes) {
  const signedProposal = d.take('signedProposal', peer.SignedProposal, bytes);
  const proposal = d.take('proposal', peer.Proposal, signedProposal.getProposalBytes_asU8());
  const header = d.take('header', common.Header, proposal.getHeader_asU8());
  decodeHeaderLayers(d, '', header);
  decodeProposalPayloadLayers(d, '', proposal.getPayload_asU8());
}

function decodeProposalResponse(d, bytes) {
  const response = d.take('proposalResponse', peer.ProposalResponse, bytes);
  decodeProposalResponsePayloadLayers(d, '', response.getPayload_asU8());
  const endorsement = need(response.getEndorsement(), 'endorsement');
  d.take('endorser', msp.SerializedIdentity, endorsement.getEndorser_asU8());
}

function decodeTransactionLayers(d, prefix, bytes) {
  const transaction = d.take(`${prefix}transaction`, peer.Transaction, bytes);
  transaction.getActionsList().forEach((action, i) => {
    const p = `${prefix}actions[${i}].`;
    const signatureHeader = d.take(`${p}signatureHeader`, common.SignatureHeader, action.getHeader_asU8());
    d.take(`${p}creator`, msp.SerializedIdentity, signatureHeader.getCreator_asU8());
    const actionPayload = d.take(`${p}actionPayload`, peer.ChaincodeActionPayload, action.getPayload_asU8());
    decodeProposalPayloadLayers(d, p, actionPayload.getChaincodeProposalPayload_asU8());
    const endorsed = need(actionPayload.getAction(), `${p}actionPayload.action`);
    decodeProposalResponsePayloadLayers(d, p, endorsed.getProposalResponsePayload_asU8());
    decodeEndorsementLayers(d, p, endorsed.getEndorsementsList());
  });
}

/** Decode the values and policies Fabric's config tree holds as bytes (the ones this test uses). */
function decodeConfigGroupLayers(d, prefix, group) {
  for (const [key, value] of mapEntries(group.getValuesMap())) {
    const p = `${prefix}/values/${key}`;
    if (key === 'MSP') {
      const mspConfig = d.take(p, msp.MSPConfig, value.getValue_asU8());
      if (mspConfig.getType() === 0) d.take(`${p}/config`, msp.FabricMSPConfig, mspConfig.getConfig_asU8());
    } else if (key === 'BatchSize') {
      d.take(p, orderer.BatchSize, value.getValue_asU8());
    }
  }
  for (const [key, configPolicy] of mapEntries(group.getPoliciesMap())) {
    const p = `${prefix}/policies/${key}`;
    const policy = need(configPolicy.getPolicy(), `${p} policy`);
    if (policy.getType() === common.Policy.PolicyType.SIGNATURE) {
      const envelope = d.take(p, common.SignaturePolicyEnvelope, policy.getValue_asU8());
      envelope.getIdentitiesList().forEach((principal, i) => {
        if (principal.getPrincipalClassification() === common.MSPPrincipal.Classification.ROLE) {
          d.take(`${p}/identities[${i}]`, common.MSPRole, principal.getPrincipal_asU8());
        }
      });
    } else if (policy.getType() === common.Policy.PolicyType.IMPLICIT_META) {
      d.take(p, common.ImplicitMetaPolicy, policy.getValue_asU8());
    }
  }
  for (const [key, child] of mapEntries(group.getGroupsMap())) {
    decodeConfigGroupLayers(d, `${prefix}/${key}`, child);
  }
}

function decodeConfigLayers(d, prefix, bytes) {
  const configEnvelope = d.take(`${prefix}configEnvelope`, common.ConfigEnvelope, bytes);
  const config = need(configEnvelope.getConfig(), 'config');
  decodeConfigGroupLayers(d, `${prefix}Channel`, need(config.getChannelGroup(), 'channel_group'));
  const lastUpdate = configEnvelope.getLastUpdate();
  if (lastUpdate) d.take(`${prefix}lastUpdate.payload`, common.Payload, lastUpdate.getPayload_asU8());
}

/** Any common.Envelope; the payload's data is decoded according to the channel header type. */
function decodeEnvelopeLayers(d, prefix, bytes) {
  const envelope = d.take(`${prefix}envelope`, common.Envelope, bytes);
  const payload = d.take(`${prefix}payload`, common.Payload, envelope.getPayload_asU8());
  decodeHeaderLayers(d, prefix, need(payload.getHeader(), 'payload header'));
  const type = d.layers[`${prefix}channelHeader`].getType();
  if (type === common.HeaderType.ENDORSER_TRANSACTION) {
    decodeTransactionLayers(d, prefix, payload.getData_asU8());
  } else if (type === common.HeaderType.CONFIG) {
    decodeConfigLayers(d, prefix, payload.getData_asU8());
  }
}

function decodeBlock(d, bytes) {
  const block = d.take('block', common.Block, bytes);
  need(block.getHeader(), 'block header');
  need(block.getData(), 'block data').getDataList_asU8().forEach((entry, i) => {
    decodeEnvelopeLayers(d, `data[${i}].`, entry);
  });
  const metadata = need(block.getMetadata(), 'block metadata').getMetadataList_asU8();
  const signatures = metadata[common.BlockMetadataIndex.SIGNATURES];
  if (signatures && signatures.length > 0) {
    const signaturesMetadata = d.take('metadata[SIGNATURES]', common.Metadata, signatures);
    d.take('metadata[SIGNATURES].value', common.OrdererBlockMetadata, signaturesMetadata.getValue_asU8());
    signaturesMetadata.getSignaturesList().forEach((signature, i) => {
      d.take(`metadata[SIGNATURES].signatures[${i}].signatureHeader`, common.SignatureHeader, signature.getSignatureHeader_asU8());
    });
  }
}

const DECODERS = {
  signed_proposal: decodeSignedProposal,
  proposal_response: decodeProposalResponse,
  endorser_tx_envelope: (d, bytes) => decodeEnvelopeLayers(d, '', bytes),
  config_envelope: (d, bytes) => decodeEnvelopeLayers(d, '', bytes),
  block: decodeBlock,
};

/** Decode the message NAME from `bytes`: returns { layers, sources } (see Layers). Throws if it cannot. */
function decode(name, bytes) {
  const decoder = need(DECODERS[name], `decoder for ${name}`);
  const d = new Layers();
  decoder(d, bytes);
  return d;
}

/** Names of the layers whose google-protobuf re-encoding differs from the bytes they were decoded from. */
function reencodingMismatches({ layers, sources }) {
  return Object.keys(sources).filter((name) => !toBuffer(layers[name].serializeBinary()).equals(toBuffer(sources[name])));
}

// ---------------------------------------------------------------------------------------------
// Summaries: the handful of values the Rust side checks, from the decoded layers

const SUMMARIZERS = {
  signed_proposal(l) {
    const spec = need(l.invocationSpec.getChaincodeSpec(), 'chaincode_spec');
    return {
      channel_id: l.channelHeader.getChannelId(),
      tx_id: l.channelHeader.getTxId(),
      mspid: l.creator.getMspid(),
      chaincode: need(spec.getChaincodeId(), 'chaincode_id').getName(),
      args: need(spec.getInput(), 'chaincode input').getArgsList_asU8().map(utf8),
      nonce_hex: hex(l.signatureHeader.getNonce_asU8()),
      signature_hex: hex(l.signedProposal.getSignature_asU8()),
    };
  },

  proposal_response(l) {
    const response = need(l.proposalResponse.getResponse(), 'response');
    const ns = need(l.results.getNsRwsetList()[0], 'ns_rwset[0]');
    const kv = l['results.nsRwset[0].rwset'];
    const read = need(kv.getReadsList()[0], 'reads[0]');
    const version = need(read.getVersion(), 'read version');
    return {
      status: response.getStatus(),
      payload_utf8: utf8(response.getPayload_asU8()),
      namespace: ns.getNamespace(),
      read_key: read.getKey(),
      read_block: version.getBlockNum(),
      read_tx: version.getTxNum(),
      write_keys: kv.getWritesList().map((w) => w.getKey()),
      event_name: need(l.events, 'events').getEventName(),
      endorser_mspid: l.endorser.getMspid(),
    };
  },

  endorser_tx_envelope(l) {
    const actions = l.transaction.getActionsList();
    let endorsements = 0;
    actions.forEach((_, i) => { endorsements += l[`actions[${i}].actionPayload`].getAction().getEndorsementsList().length; });
    return {
      tx_id: l.channelHeader.getTxId(),
      channel_id: l.channelHeader.getChannelId(),
      header_type: l.channelHeader.getType(),
      n_actions: actions.length,
      n_endorsements: endorsements,
    };
  },

  config_envelope(l) {
    const config = need(l.configEnvelope.getConfig(), 'config');
    const groups = need(config.getChannelGroup(), 'channel_group').getGroupsMap();
    const application = need(groups.get('Application'), 'Application group');
    const [orgName] = need(mapEntries(application.getGroupsMap())[0], 'an Application org group');
    return {
      sequence: config.getSequence(),
      groups: mapEntries(groups).map(([key]) => key).sort(),
      org_msp_name: need(l[`Channel/Application/${orgName}/values/MSP/config`], 'FabricMSPConfig').getName(),
      batch_max_message_count: need(l['Channel/Orderer/values/BatchSize'], 'BatchSize').getMaxMessageCount(),
    };
  },

  block(l) {
    const header = l.block.getHeader();
    const metadata = l.block.getMetadata().getMetadataList_asU8();
    return {
      number: header.getNumber(),
      previous_hash_hex: hex(header.getPreviousHash_asU8()),
      data_hash_hex: hex(header.getDataHash_asU8()),
      header_hash_hex: blockHeaderHash(header.getNumber(), header.getPreviousHash_asU8(), header.getDataHash_asU8()).toString('hex'),
      n_data: l.block.getData().getDataList().length,
      filter_hex: hex(metadata[common.BlockMetadataIndex.TRANSACTIONS_FILTER] || new Uint8Array()),
    };
  },
};

/** The summary of an already decoded message NAME. */
function summarize(name, decoded) {
  return need(SUMMARIZERS[name], `summarizer for ${name}`)(decoded.layers);
}

/** JSON text of { NAME: summary, ... }, formatted the same way by produce.js and consume.js. */
function summariesJson(summaries) {
  return `${JSON.stringify(summaries, null, 2)}\n`;
}

module.exports = {
  NAMES,
  Timestamp,
  toBuffer,
  hex,
  sha256,
  computeTxId,
  blockHeaderHash,
  blockDataHash,
  decode,
  reencodingMismatches,
  summarize,
  summariesJson,
};
