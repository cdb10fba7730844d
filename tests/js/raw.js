// A raw-protocol Fabric client, as Fabric's load tools are: no Gateway and no
// SDK, only Fabric's own JavaScript protobufs and the grpc-js service clients
// that @hyperledger/fabric-protos ships. It drives one transaction through
// the network the way such tools do:
//
//   1. opens protos.Deliver/DeliverFiltered on the first peer, from the
//      oldest block with no end, as an event listener does;
//   2. builds and signs a proposal for `kv put`, sends it to every
//      organisation's peer with protos.Endorser/ProcessProposal;
//   3. assembles the transaction from the proposal responses, signs it and
//      sends it with orderer.AtomicBroadcast/Broadcast, after a copy whose
//      signature was tampered with, on the same stream;
//   4. waits on the filtered stream for the transaction's validation code;
//   5. seeks Newest (start and stop) on the peer's protos.Deliver/Deliver
//      and on the orderer's AtomicBroadcast/Deliver.
//
//   node raw.js <connection.yaml as JSON>
//
// The argument is the connection file `weft network up` writes, converted to
// JSON by the caller (this package has no YAML parser). Prints one JSON
// object with what the client observed; the Rust test (tests/bench.rs)
// asserts on it. Exits non-zero on an error it cannot report.
//
// Signatures: ECDSA P-256 over SHA-256, DER-encoded, with S in the lower half
// of the curve order, as Fabric's MSP requires. TxID: hex(SHA-256(nonce ||
// creator)), as Fabric computes it.
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const { common, msp, orderer, peer } = require('@hyperledger/fabric-protos');
const { Timestamp } = require('./summary');

/** How long any one step may take before the client reports a timeout. */
const STEP_MS = 20000;
/** The order of P-256, for low-S normalisation. */
const P256_N = BigInt('0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551');

// ---------------------------------------------------------------------------------------------
// Signing

/** A big-endian unsigned integer as a DER INTEGER. */
function derInteger(value) {
    let bytes = Buffer.from(value.toString(16).padStart(64, '0'), 'hex');
    let start = 0;
    while (start < bytes.length - 1 && bytes[start] === 0) start += 1;
    bytes = bytes.subarray(start);
    if (bytes[0] & 0x80) bytes = Buffer.concat([Buffer.from([0]), bytes]);
    return Buffer.concat([Buffer.from([0x02, bytes.length]), bytes]);
}

/** Signs `message` with `key`: DER ECDSA signature with low S. */
function sign(key, message) {
    const raw = crypto.sign('sha256', message, { key, dsaEncoding: 'ieee-p1363' });
    const r = BigInt(`0x${raw.subarray(0, 32).toString('hex')}`);
    let s = BigInt(`0x${raw.subarray(32).toString('hex')}`);
    if (s > P256_N / 2n) s = P256_N - s;
    const body = Buffer.concat([derInteger(r), derInteger(s)]);
    return Buffer.concat([Buffer.from([0x30, body.length]), body]);
}

// ---------------------------------------------------------------------------------------------
// Messages

function now() {
    const millis = Date.now();
    const timestamp = new Timestamp();
    timestamp.setSeconds(Math.floor(millis / 1000));
    timestamp.setNanos((millis % 1000) * 1e6);
    return timestamp;
}

/** The client: its serialized identity and key. */
function client(mspId, certPath, keyPath) {
    const identity = new msp.SerializedIdentity();
    identity.setMspid(mspId);
    identity.setIdBytes(fs.readFileSync(certPath));
    return {
        creator: Buffer.from(identity.serializeBinary()),
        key: crypto.createPrivateKey(fs.readFileSync(keyPath)),
    };
}

/** A header of `type` on `channel`, with a fresh nonce; returns it and its TxID. */
function header(me, type, channel, extension) {
    const nonce = crypto.randomBytes(24);
    const txId = crypto.createHash('sha256').update(nonce).update(me.creator).digest('hex');
    const channelHeader = new common.ChannelHeader();
    channelHeader.setType(type);
    channelHeader.setChannelId(channel);
    channelHeader.setTxId(txId);
    channelHeader.setTimestamp(now());
    if (extension) channelHeader.setExtension$(extension);
    const signatureHeader = new common.SignatureHeader();
    signatureHeader.setCreator(me.creator);
    signatureHeader.setNonce(nonce);
    const result = new common.Header();
    result.setChannelHeader(channelHeader.serializeBinary());
    result.setSignatureHeader(signatureHeader.serializeBinary());
    return { header: result, txId };
}

/** A signed proposal to invoke `chaincode` with `args`. */
function proposal(me, channel, chaincode, args) {
    const chaincodeId = new peer.ChaincodeID();
    chaincodeId.setName(chaincode);
    const extension = new peer.ChaincodeHeaderExtension();
    extension.setChaincodeId(chaincodeId);
    const { header: proposalHeader, txId } = header(
        me,
        common.HeaderType.ENDORSER_TRANSACTION,
        channel,
        extension.serializeBinary(),
    );
    const input = new peer.ChaincodeInput();
    input.setArgsList(args.map((arg) => Buffer.from(arg)));
    const spec = new peer.ChaincodeSpec();
    spec.setType(peer.ChaincodeSpec.Type.GOLANG);
    spec.setChaincodeId(chaincodeId);
    spec.setInput(input);
    const invocation = new peer.ChaincodeInvocationSpec();
    invocation.setChaincodeSpec(spec);
    const payload = new peer.ChaincodeProposalPayload();
    payload.setInput(invocation.serializeBinary());

    const built = new peer.Proposal();
    built.setHeader(proposalHeader.serializeBinary());
    built.setPayload(payload.serializeBinary());
    const bytes = built.serializeBinary();
    const signed = new peer.SignedProposal();
    signed.setProposalBytes(bytes);
    signed.setSignature(sign(me.key, bytes));
    return { signed, header: proposalHeader, payload, txId };
}

/** The signed transaction envelope of `prop`, endorsed by `responses`. */
function transaction(me, prop, responses) {
    const endorsed = new peer.ChaincodeEndorsedAction();
    endorsed.setProposalResponsePayload(responses[0].getPayload());
    endorsed.setEndorsementsList(responses.map((response) => response.getEndorsement()));
    const actionPayload = new peer.ChaincodeActionPayload();
    // The proposal payload as proposed (it carries no transient data here).
    actionPayload.setChaincodeProposalPayload(prop.payload.serializeBinary());
    actionPayload.setAction(endorsed);
    const action = new peer.TransactionAction();
    action.setHeader(prop.header.getSignatureHeader());
    action.setPayload(actionPayload.serializeBinary());
    const tx = new peer.Transaction();
    tx.setActionsList([action]);
    const payload = new common.Payload();
    payload.setHeader(prop.header);
    payload.setData(tx.serializeBinary());
    return envelope(me, payload);
}

function envelope(me, payload) {
    const bytes = payload.serializeBinary();
    const result = new common.Envelope();
    result.setPayload(bytes);
    result.setSignature(sign(me.key, bytes));
    return result;
}

function position(where) {
    const result = new orderer.SeekPosition();
    if (where === 'oldest') result.setOldest(new orderer.SeekOldest());
    else if (where === 'newest') result.setNewest(new orderer.SeekNewest());
    else {
        const specified = new orderer.SeekSpecified();
        specified.setNumber(where);
        result.setSpecified(specified);
    }
    return result;
}

/** A signed Deliver request for blocks `start` to `stop`. */
function seek(me, channel, start, stop) {
    const info = new orderer.SeekInfo();
    info.setStart(position(start));
    info.setStop(position(stop));
    info.setBehavior(orderer.SeekInfo.SeekBehavior.BLOCK_UNTIL_READY);
    const payload = new common.Payload();
    payload.setHeader(header(me, common.HeaderType.DELIVER_SEEK_INFO, channel).header);
    payload.setData(info.serializeBinary());
    return envelope(me, payload);
}

// ---------------------------------------------------------------------------------------------
// Calls

const statusName = (code) => Object.keys(common.Status).find((name) => common.Status[name] === code);
const codeName = (code) =>
    Object.keys(peer.TxValidationCode).find((name) => peer.TxValidationCode[name] === code);

const headerTypeName = (type) =>
    Object.keys(common.HeaderType).find((name) => common.HeaderType[name] === type);

function chaincodeEvent(event) {
    if (!event) return null;
    return {
        chaincodeId: event.getChaincodeId(),
        txId: event.getTxId(),
        name: event.getEventName(),
        payloadBytes: event.getPayload_asU8().length,
    };
}

function deadline() {
    return { deadline: Date.now() + STEP_MS };
}

function processProposal(endpoint, signed) {
    const endorser = new peer.EndorserClient(endpoint, grpc.credentials.createInsecure());
    return new Promise((resolve, reject) => {
        endorser.processProposal(signed, deadline(), (error, response) => {
            endorser.close();
            if (error) reject(error);
            else resolve(response);
        });
    });
}

/** Sends `envelopes` on one Broadcast stream; resolves to the status names answered. */
function broadcast(endpoint, envelopes) {
    const service = new orderer.AtomicBroadcastClient(endpoint, grpc.credentials.createInsecure());
    const stream = service.broadcast(deadline());
    const statuses = [];
    return new Promise((resolve, reject) => {
        stream.on('data', (response) => {
            statuses.push(statusName(response.getStatus()));
            if (statuses.length === envelopes.length) stream.end();
        });
        stream.on('error', (error) => {
            service.close();
            reject(error);
        });
        stream.on('end', () => {
            service.close();
            resolve(statuses);
        });
        envelopes.forEach((e) => stream.write(e));
    });
}

/**
 * Reads a Deliver response stream: each message as { block: n } or
 * { status: name }, until `done(messages)` says so, the server ends the
 * stream, or STEP_MS passes (then `timedOut` is set). Also records how long
 * the first message took.
 */
function readDeliver(stream, number, done) {
    const started = Date.now();
    const observed = { messages: [], timedOut: false, firstMessageMs: null };
    return new Promise((resolve) => {
        const finish = () => {
            clearTimeout(timer);
            stream.cancel();
            resolve(observed);
        };
        const timer = setTimeout(() => {
            observed.timedOut = true;
            finish();
        }, STEP_MS);
        stream.on('data', (response) => {
            if (observed.firstMessageMs === null) observed.firstMessageMs = Date.now() - started;
            observed.messages.push(number(response));
            if (done(observed.messages)) finish();
        });
        stream.on('error', (error) => {
            if (error.code !== grpc.status.CANCELLED) observed.error = error.message;
            finish();
        });
        stream.on('end', finish);
    });
}

/** What a peer's DeliverResponse is: a block, a filtered block (with its transactions) or a status. */
function peerMessage(response) {
    switch (response.getTypeCase()) {
        case peer.DeliverResponse.TypeCase.BLOCK:
            return { block: response.getBlock().getHeader().getNumber() };
        case peer.DeliverResponse.TypeCase.FILTERED_BLOCK: {
            const filtered = response.getFilteredBlock();
            return {
                filteredBlock: filtered.getNumber(),
                transactions: filtered.getFilteredTransactionsList().map((tx) => ({
                    txId: tx.getTxid(),
                    type: headerTypeName(tx.getType()),
                    code: codeName(tx.getTxValidationCode()),
                    // null: no transaction actions (Fabric sends them for endorser
                    // transactions only); else each action's chaincode event.
                    events: tx.hasTransactionActions()
                        ? tx
                              .getTransactionActions()
                              .getChaincodeActionsList()
                              .map((action) => chaincodeEvent(action.getChaincodeEvent()))
                        : null,
                })),
            };
        }
        case peer.DeliverResponse.TypeCase.STATUS:
            return { status: statusName(response.getStatus()) };
        default:
            return { other: response.getTypeCase() };
    }
}

function ordererMessage(response) {
    switch (response.getTypeCase()) {
        case orderer.DeliverResponse.TypeCase.BLOCK:
            return { block: response.getBlock().getHeader().getNumber() };
        case orderer.DeliverResponse.TypeCase.STATUS:
            return { status: statusName(response.getStatus()) };
        default:
            return { other: response.getTypeCase() };
    }
}

/** A seek to Newest, start and stop, answered by `open()`'s stream. */
function seekNewest(open, request, number) {
    const stream = open();
    const read = readDeliver(stream, number, (messages) => messages.some((m) => m.status));
    stream.write(request);
    return read;
}

// ---------------------------------------------------------------------------------------------

async function main() {
    const connection = JSON.parse(process.argv[2]);
    const channel = connection.channel;
    const [org] = connection.organizations;
    const me = client(org.mspId, org.user.certificate, org.user.privateKey);
    const peerEndpoint = org.peers[0].endpoint;
    const ordererEndpoint = connection.orderers[0].endpoint;
    const insecure = grpc.credentials.createInsecure();
    const peerDeliver = new peer.DeliverClient(peerEndpoint, insecure);
    const ordererService = new orderer.AtomicBroadcastClient(ordererEndpoint, insecure);
    const seen = {};

    // 1. The event listener, from the oldest block on.
    const prop = proposal(me, channel, 'kv', ['put', `raw-${process.pid}`, 'from a raw client']);
    seen.txId = prop.txId;
    const filteredStream = peerDeliver.deliverFiltered();
    const filtered = readDeliver(filteredStream, peerMessage, (messages) =>
        messages.some((m) => (m.transactions || []).some((tx) => tx.txId === prop.txId)),
    );
    filteredStream.write(seek(me, channel, 'oldest', Number.MAX_SAFE_INTEGER));

    // 2. Endorsement by every organisation's first peer.
    const responses = await Promise.all(
        connection.organizations.map((o) => processProposal(o.peers[0].endpoint, prop.signed)),
    );
    seen.endorsements = responses.map((response) => ({
        status: response.getResponse().getStatus(),
        message: response.getResponse().getMessage(),
        endorser: msp.SerializedIdentity.deserializeBinary(response.getEndorsement().getEndorser()).getMspid(),
    }));
    const payloads = responses.map((response) => Buffer.from(response.getPayload()).toString('hex'));
    seen.samePayloads = payloads.every((payload) => payload === payloads[0]);

    // 3. Broadcast: a copy with a tampered signature, then the transaction.
    const tx = transaction(me, prop, responses);
    const forged = common.Envelope.deserializeBinary(tx.serializeBinary());
    const signature = Buffer.from(forged.getSignature());
    signature[signature.length - 1] ^= 1;
    forged.setSignature(signature);
    seen.broadcast = await broadcast(ordererEndpoint, [forged, tx]);

    // 4. The filtered stream, until the transaction shows up.
    seen.filtered = await filtered;
    const committed = seen.filtered.messages.find((m) =>
        (m.transactions || []).some((t) => t.txId === prop.txId),
    );
    seen.txBlock = committed ? committed.filteredBlock : null;
    seen.txCode = committed ? committed.transactions.find((t) => t.txId === prop.txId).code : null;

    // 5. Newest, on the peer and on the orderer.
    seen.peerNewest = await seekNewest(
        () => peerDeliver.deliver(),
        seek(me, channel, 'newest', 'newest'),
        peerMessage,
    );
    seen.ordererNewest = await seekNewest(
        () => ordererService.deliver(),
        seek(me, channel, 'newest', 'newest'),
        ordererMessage,
    );
    peerDeliver.close();
    ordererService.close();
    console.log(JSON.stringify(seen));
}

main().catch((error) => {
    console.error(error);
    process.exit(1);
});
