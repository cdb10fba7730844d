// produce.js OUTDIR: the JavaScript producer of the Fabric wire-compatibility test.
//
// Builds five deterministic Fabric messages with Fabric's own generated JavaScript protobufs
// (@hyperledger/fabric-protos, google-protobuf style) and writes, for each NAME in summary.NAMES:
//   OUTDIR/NAME.bin   the serialized message
//   OUTDIR/NAME.json  { summary, message, layers }: the summary the Rust side checks (summary.js),
//                     the message's toObject() (bytes as base64), and toObject() of every nested
//                     message decoded from a bytes field, keyed by a path-like layer name
// and also OUTDIR/hashes.json ({ tx_id, header_hash_hex }) and OUTDIR/summaries.json (every summary,
// formatted exactly as consume.js prints them, so the two can be compared with diff).
//
// Nothing here is random or read from the clock: nonces, signatures, certificates and timestamps
// are fixed, so every run writes the same bytes.
//
// Observed with google-protobuf 3.21.4 (the version fabric-protos 0.3.7 pulls in; checked at run
// time by checkMapEncoding below):
//   * serializeBinary() writes map entries sorted by key (JavaScript string order, which is byte
//     order for ASCII keys), whatever the insertion order: the same order as prost with BTreeMap.
//   * A map entry always carries both its key (field 1) and value (field 2), even when they are
//     defaults: an empty ConfigGroup value is written as `12 00`. prost skips a default key or
//     value inside a map entry, so such an entry would not re-encode byte-identically. Every map
//     value in this test is non-default, so the question does not arise here.
//   * Outside maps, proto3 defaults (0, "", false, empty bytes) are not written, as in prost; a
//     message-typed field that is set but empty is written (`0a 00`); a oneof member set to its
//     default is written (SignaturePolicy.signed_by = 0 gives `08 00`); empty entries of a
//     repeated bytes field are written (`0a 00`).
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { common, peer, msp, orderer, ledger } = require('@hyperledger/fabric-protos');
const S = require('./summary');

const { rwset } = ledger;
const { kvrwset } = rwset;

// ---------------------------------------------------------------------------------------------
// Fixed inputs

/** `length` bytes of a fixed pattern; `seed` tells patterns apart. */
function fixedBytes(length, seed) {
  return Buffer.from(Array.from({ length }, (_, i) => (seed + i * 7) & 0xff));
}

/** A fixed, PEM-looking certificate (never parsed as X.509 by this test). */
function fixedPem(label) {
  const body = Buffer.from(`weft wire-compatibility test certificate for ${label}`).toString('base64');
  return `-----BEGIN CERTIFICATE-----\n${body}\n-----END CERTIFICATE-----\n`;
}

const CHANNEL_ID = 'mychannel';
const CHAINCODE = 'basic';
const ARGS = ['put', 'k1', 'v1'];
const TIMESTAMP = { seconds: 1700000000, nanos: 123000000 };

const NONCE = fixedBytes(24, 0x01);
const ORDERER_NONCE = fixedBytes(24, 0x61);
const PROPOSAL_SIGNATURE = fixedBytes(70, 0x30);
const PROPOSAL_HASH = fixedBytes(32, 0x11);
const ENDORSEMENT_SIGNATURES = [fixedBytes(71, 0x40), fixedBytes(72, 0x41)];
const ENVELOPE_SIGNATURE = fixedBytes(70, 0x50);
const CONFIG_SIGNATURE = fixedBytes(70, 0x70);
const BLOCK_SIGNATURE = fixedBytes(70, 0x80);
const PREVIOUS_HASH = fixedBytes(32, 0x90);
const BLOCK_NUMBER = 7;
const TRANSACTIONS_FILTER = Buffer.from([0, 11]);
const ROOT_CERT = Buffer.from(fixedPem('ca.org1.example.com'));

// ---------------------------------------------------------------------------------------------
// Builders (each returns a message or its serialized bytes)

function serializedIdentity(mspid, pem) {
  const identity = new msp.SerializedIdentity();
  identity.setMspid(mspid);
  identity.setIdBytes(Buffer.from(pem));
  return identity.serializeBinary();
}

function timestamp() {
  const ts = new S.Timestamp();
  ts.setSeconds(TIMESTAMP.seconds);
  ts.setNanos(TIMESTAMP.nanos);
  return ts;
}

function signatureHeader(creator, nonce) {
  const header = new common.SignatureHeader();
  header.setCreator(creator);
  header.setNonce(nonce);
  return header.serializeBinary();
}

function chaincodeId(name, version) {
  const id = new peer.ChaincodeID();
  id.setName(name);
  if (version) id.setVersion(version);
  return id;
}

function channelHeader({ type, txId = '', extension }) {
  const header = new common.ChannelHeader();
  header.setType(type);
  header.setVersion(0);
  header.setTimestamp(timestamp());
  header.setChannelId(CHANNEL_ID);
  header.setTxId(txId);
  header.setEpoch(0);
  if (extension) header.setExtension$(extension);
  return header.serializeBinary();
}

function header(channelHeaderBytes, signatureHeaderBytes) {
  const h = new common.Header();
  h.setChannelHeader(channelHeaderBytes);
  h.setSignatureHeader(signatureHeaderBytes);
  return h;
}

function endorsement(endorser, signature) {
  const e = new peer.Endorsement();
  e.setEndorser(endorser);
  e.setSignature(signature);
  return e;
}

function response(status, payload) {
  const r = new peer.Response();
  r.setStatus(status);
  r.setMessage('');
  r.setPayload(Buffer.from(payload));
  return r;
}

function envelope(payload, signature) {
  const e = new common.Envelope();
  e.setPayload(payload.serializeBinary());
  if (signature) e.setSignature(signature);
  return e;
}

// Identities, the transaction id and the headers every message below shares.

const CREATOR = serializedIdentity('Org1MSP', fixedPem('User1@org1.example.com'));
const ENDORSERS = [
  serializedIdentity('Org1MSP', fixedPem('peer0.org1.example.com')),
  serializedIdentity('Org2MSP', fixedPem('peer0.org2.example.com')),
];
const ORDERER = serializedIdentity('OrdererMSP', fixedPem('orderer.example.com'));

const TX_ID = S.computeTxId(NONCE, CREATOR);
const SIGNATURE_HEADER = signatureHeader(CREATOR, NONCE);
const ORDERER_SIGNATURE_HEADER = signatureHeader(ORDERER, ORDERER_NONCE);

function chaincodeHeaderExtension() {
  const extension = new peer.ChaincodeHeaderExtension();
  extension.setChaincodeId(chaincodeId(CHAINCODE));
  return extension.serializeBinary();
}

const ENDORSER_CHANNEL_HEADER = channelHeader({
  type: common.HeaderType.ENDORSER_TRANSACTION,
  txId: TX_ID,
  extension: chaincodeHeaderExtension(),
});

function chaincodeProposalPayload() {
  const input = new peer.ChaincodeInput();
  input.setArgsList(ARGS.map((arg) => Buffer.from(arg)));

  const spec = new peer.ChaincodeSpec();
  spec.setType(peer.ChaincodeSpec.Type.NODE);
  spec.setChaincodeId(chaincodeId(CHAINCODE));
  spec.setInput(input);

  const invocation = new peer.ChaincodeInvocationSpec();
  invocation.setChaincodeSpec(spec);

  const payload = new peer.ChaincodeProposalPayload();
  payload.setInput(invocation.serializeBinary());
  return payload.serializeBinary();
}

function kvRwset() {
  const version = new kvrwset.Version();
  version.setBlockNum(5);
  version.setTxNum(2);

  const read = new kvrwset.KVRead();
  read.setKey('k0');
  read.setVersion(version);

  const write = new kvrwset.KVWrite();
  write.setKey('k1');
  write.setIsDelete(false);
  write.setValue(Buffer.from('v1'));

  const deletion = new kvrwset.KVWrite();
  deletion.setKey('k2');
  deletion.setIsDelete(true);

  const set = new kvrwset.KVRWSet();
  set.setReadsList([read]);
  set.setWritesList([write, deletion]);
  return set.serializeBinary();
}

function proposalResponsePayload() {
  const ns = new rwset.NsReadWriteSet();
  ns.setNamespace(CHAINCODE);
  ns.setRwset(kvRwset());

  const results = new rwset.TxReadWriteSet();
  results.setDataModel(rwset.TxReadWriteSet.DataModel.KV);
  results.setNsRwsetList([ns]);

  const event = new peer.ChaincodeEvent();
  event.setChaincodeId(CHAINCODE);
  event.setTxId(TX_ID);
  event.setEventName('put');
  event.setPayload(Buffer.from('k1'));

  const action = new peer.ChaincodeAction();
  action.setResults(results.serializeBinary());
  action.setEvents(event.serializeBinary());
  action.setResponse(response(200, 'ok'));
  action.setChaincodeId(chaincodeId(CHAINCODE, '1.0'));

  const payload = new peer.ProposalResponsePayload();
  payload.setProposalHash(PROPOSAL_HASH);
  payload.setExtension$(action.serializeBinary());
  return payload.serializeBinary();
}

const PROPOSAL_PAYLOAD = chaincodeProposalPayload();
const PROPOSAL_RESPONSE_PAYLOAD = proposalResponsePayload();

// ---------------------------------------------------------------------------------------------
// The five messages

function buildSignedProposal() {
  const proposal = new peer.Proposal();
  proposal.setHeader(header(ENDORSER_CHANNEL_HEADER, SIGNATURE_HEADER).serializeBinary());
  proposal.setPayload(PROPOSAL_PAYLOAD);

  const signed = new peer.SignedProposal();
  signed.setProposalBytes(proposal.serializeBinary());
  signed.setSignature(PROPOSAL_SIGNATURE);
  return signed.serializeBinary();
}

function buildProposalResponse() {
  const r = new peer.ProposalResponse();
  r.setVersion(1);
  r.setTimestamp(timestamp());
  r.setResponse(response(200, 'ok'));
  r.setPayload(PROPOSAL_RESPONSE_PAYLOAD);
  r.setEndorsement(endorsement(ENDORSERS[0], ENDORSEMENT_SIGNATURES[0]));
  return r.serializeBinary();
}

function buildEndorserTxEnvelope() {
  const endorsed = new peer.ChaincodeEndorsedAction();
  endorsed.setProposalResponsePayload(PROPOSAL_RESPONSE_PAYLOAD);
  endorsed.setEndorsementsList(ENDORSERS.map((endorser, i) => endorsement(endorser, ENDORSEMENT_SIGNATURES[i])));

  const actionPayload = new peer.ChaincodeActionPayload();
  actionPayload.setChaincodeProposalPayload(PROPOSAL_PAYLOAD);
  actionPayload.setAction(endorsed);

  const action = new peer.TransactionAction();
  action.setHeader(SIGNATURE_HEADER);
  action.setPayload(actionPayload.serializeBinary());

  const transaction = new peer.Transaction();
  transaction.setActionsList([action]);

  const payload = new common.Payload();
  payload.setHeader(header(ENDORSER_CHANNEL_HEADER, SIGNATURE_HEADER));
  payload.setData(transaction.serializeBinary());
  return envelope(payload, ENVELOPE_SIGNATURE).serializeBinary();
}

function configValue(bytes) {
  const value = new common.ConfigValue();
  value.setValue(bytes);
  value.setModPolicy('Admins');
  return value;
}

function configPolicy(type, bytes) {
  const policy = new common.Policy();
  policy.setType(type);
  policy.setValue(bytes);

  const configPolicy = new common.ConfigPolicy();
  configPolicy.setPolicy(policy);
  configPolicy.setModPolicy('Admins');
  return configPolicy;
}

/** A ConfigGroup with mod_policy "Admins"; groups, values and policies are [key, value] lists, added in that order. */
function configGroup({ version = 0, groups = [], values = [], policies = [] }) {
  const group = new common.ConfigGroup();
  group.setVersion(version);
  for (const [key, child] of groups) group.getGroupsMap().set(key, child);
  for (const [key, value] of values) group.getValuesMap().set(key, value);
  for (const [key, policy] of policies) group.getPoliciesMap().set(key, policy);
  group.setModPolicy('Admins');
  return group;
}

function orgGroup() {
  const fabricMsp = new msp.FabricMSPConfig();
  fabricMsp.setName('Org1MSP');
  fabricMsp.setRootCertsList([ROOT_CERT]);

  const mspConfig = new msp.MSPConfig();
  mspConfig.setType(0); // FABRIC
  mspConfig.setConfig(fabricMsp.serializeBinary());

  const role = new common.MSPRole();
  role.setMspIdentifier('Org1MSP');
  role.setRole(common.MSPRole.MSPRoleType.MEMBER);

  const principal = new common.MSPPrincipal();
  principal.setPrincipalClassification(common.MSPPrincipal.Classification.ROLE);
  principal.setPrincipal(role.serializeBinary());

  const signedBy0 = new common.SignaturePolicy();
  signedBy0.setSignedBy(0);
  const nOutOf = new common.SignaturePolicy.NOutOf();
  nOutOf.setN(1);
  nOutOf.setRulesList([signedBy0]);
  const rule = new common.SignaturePolicy();
  rule.setNOutOf(nOutOf);

  const readers = new common.SignaturePolicyEnvelope();
  readers.setVersion(0);
  readers.setRule(rule);
  readers.setIdentitiesList([principal]);

  return configGroup({
    values: [['MSP', configValue(mspConfig.serializeBinary())]],
    policies: [['Readers', configPolicy(common.Policy.PolicyType.SIGNATURE, readers.serializeBinary())]],
  });
}

function channelGroup(topLevelOrder = ['Application', 'Orderer']) {
  const batchSize = new orderer.BatchSize();
  batchSize.setMaxMessageCount(10);
  batchSize.setAbsoluteMaxBytes(103809024);
  batchSize.setPreferredMaxBytes(524288);

  const writers = new common.ImplicitMetaPolicy();
  writers.setSubPolicy('Writers');
  writers.setRule(common.ImplicitMetaPolicy.Rule.ANY);

  const topLevel = {
    Application: configGroup({ groups: [['Org1MSP', orgGroup()]] }),
    Orderer: configGroup({ values: [['BatchSize', configValue(batchSize.serializeBinary())]] }),
  };
  return configGroup({
    version: 1,
    groups: topLevelOrder.map((key) => [key, topLevel[key]]),
    policies: [['Writers', configPolicy(common.Policy.PolicyType.IMPLICIT_META, writers.serializeBinary())]],
  });
}

function buildConfigEnvelope() {
  const config = new common.Config();
  config.setSequence(3);
  config.setChannelGroup(channelGroup());

  const updatePayload = new common.Payload();
  updatePayload.setHeader(header(channelHeader({ type: common.HeaderType.CONFIG_UPDATE }), new Uint8Array()));

  const configEnvelope = new common.ConfigEnvelope();
  configEnvelope.setConfig(config);
  configEnvelope.setLastUpdate(envelope(updatePayload));

  const payload = new common.Payload();
  payload.setHeader(header(channelHeader({ type: common.HeaderType.CONFIG }), ORDERER_SIGNATURE_HEADER));
  payload.setData(configEnvelope.serializeBinary());
  return envelope(payload, CONFIG_SIGNATURE).serializeBinary();
}

function buildBlock(txEnvelope) {
  const data = [txEnvelope, txEnvelope];

  const blockHeader = new common.BlockHeader();
  blockHeader.setNumber(BLOCK_NUMBER);
  blockHeader.setPreviousHash(PREVIOUS_HASH);
  blockHeader.setDataHash(S.blockDataHash(data));

  const blockData = new common.BlockData();
  blockData.setDataList(data);

  const lastConfig = new common.LastConfig();
  lastConfig.setIndex(0);
  const ordererMetadata = new common.OrdererBlockMetadata();
  ordererMetadata.setLastConfig(lastConfig);

  const signature = new common.MetadataSignature();
  signature.setSignatureHeader(ORDERER_SIGNATURE_HEADER);
  signature.setSignature(BLOCK_SIGNATURE);

  const signatures = new common.Metadata();
  signatures.setValue(ordererMetadata.serializeBinary());
  signatures.setSignaturesList([signature]);

  const metadata = Array.from({ length: 5 }, () => new Uint8Array());
  metadata[common.BlockMetadataIndex.SIGNATURES] = signatures.serializeBinary();
  metadata[common.BlockMetadataIndex.TRANSACTIONS_FILTER] = TRANSACTIONS_FILTER;
  const blockMetadata = new common.BlockMetadata();
  blockMetadata.setMetadataList(metadata);

  const block = new common.Block();
  block.setHeader(blockHeader);
  block.setData(blockData);
  block.setMetadata(blockMetadata);
  return block.serializeBinary();
}

// ---------------------------------------------------------------------------------------------
// What each summary must say, written from the inputs above rather than from decoding

function expectedSummaries(txEnvelope) {
  const dataHash = S.blockDataHash([txEnvelope, txEnvelope]);
  return {
    signed_proposal: {
      channel_id: CHANNEL_ID,
      tx_id: TX_ID,
      mspid: 'Org1MSP',
      chaincode: CHAINCODE,
      args: ARGS,
      nonce_hex: NONCE.toString('hex'),
      signature_hex: PROPOSAL_SIGNATURE.toString('hex'),
    },
    proposal_response: {
      status: 200,
      payload_utf8: 'ok',
      namespace: CHAINCODE,
      read_key: 'k0',
      read_block: 5,
      read_tx: 2,
      write_keys: ['k1', 'k2'],
      event_name: 'put',
      endorser_mspid: 'Org1MSP',
    },
    endorser_tx_envelope: {
      tx_id: TX_ID,
      channel_id: CHANNEL_ID,
      header_type: common.HeaderType.ENDORSER_TRANSACTION,
      n_actions: 1,
      n_endorsements: 2,
    },
    config_envelope: {
      sequence: 3,
      groups: ['Application', 'Orderer'],
      org_msp_name: 'Org1MSP',
      batch_max_message_count: 10,
    },
    block: {
      number: BLOCK_NUMBER,
      previous_hash_hex: PREVIOUS_HASH.toString('hex'),
      data_hash_hex: dataHash.toString('hex'),
      header_hash_hex: S.blockHeaderHash(BLOCK_NUMBER, PREVIOUS_HASH, dataHash).toString('hex'),
      n_data: 2,
      filter_hex: TRANSACTIONS_FILTER.toString('hex'),
    },
  };
}

/** Check the map behaviour the header comment describes, so a google-protobuf change cannot slip by. */
function checkMapEncoding() {
  const sorted = S.toBuffer(channelGroup(['Application', 'Orderer']).serializeBinary());
  const reversed = S.toBuffer(channelGroup(['Orderer', 'Application']).serializeBinary());
  assert.ok(sorted.equals(reversed), 'google-protobuf no longer sorts map keys when serializing');

  const withEmptyValue = new common.ConfigGroup();
  withEmptyValue.getGroupsMap().set('a', new common.ConfigGroup());
  // field 2 (groups), entry length 5: key "a" (0a 01 61) and the empty value written anyway (12 00)
  assert.equal(S.hex(withEmptyValue.serializeBinary()), '12050a01611200');
}

// ---------------------------------------------------------------------------------------------

function main() {
  const outDir = process.argv[2];
  if (!outDir) {
    process.stderr.write('usage: node produce.js OUTDIR\n');
    process.exit(2);
  }
  checkMapEncoding();

  const txEnvelope = buildEndorserTxEnvelope();
  const messages = {
    signed_proposal: buildSignedProposal(),
    proposal_response: buildProposalResponse(),
    endorser_tx_envelope: txEnvelope,
    config_envelope: buildConfigEnvelope(),
    block: buildBlock(txEnvelope),
  };
  const expected = expectedSummaries(txEnvelope);

  fs.mkdirSync(outDir, { recursive: true });
  const summaries = {};
  for (const name of S.NAMES) {
    const bytes = messages[name];
    // Decode our own bytes exactly as consume.js will, so the summary comes from the wire.
    const decoded = S.decode(name, bytes);
    assert.deepEqual(S.reencodingMismatches(decoded), [], `${name}: re-encoding is not byte-identical`);
    const summary = S.summarize(name, decoded);
    assert.deepStrictEqual(summary, expected[name], `${name}: summary differs from what was built`);
    summaries[name] = summary;

    const [rootName, ...nested] = Object.keys(decoded.layers);
    const layers = Object.fromEntries(nested.map((layer) => [layer, decoded.layers[layer].toObject()]));
    const json = { summary, message: decoded.layers[rootName].toObject(), layers };
    fs.writeFileSync(path.join(outDir, `${name}.bin`), bytes);
    fs.writeFileSync(path.join(outDir, `${name}.json`), `${JSON.stringify(json, null, 2)}\n`);
  }

  const hashes = { tx_id: TX_ID, header_hash_hex: summaries.block.header_hash_hex };
  fs.writeFileSync(path.join(outDir, 'hashes.json'), `${JSON.stringify(hashes, null, 2)}\n`);
  fs.writeFileSync(path.join(outDir, 'summaries.json'), S.summariesJson(summaries));
  process.stderr.write(`produce.js: wrote ${S.NAMES.length} messages to ${outDir}\n`);
}

main();
