// Drives a weft peer with Fabric's own Gateway client library
// (@hyperledger/fabric-gateway), unchanged: submit, evaluate, commit
// status and chaincode events against the built-in `kv` chaincode.
//
//   node gateway.js <peer host:port> <mspId> <cert.pem> <key.pem> <channel> \
//       [tls-ca.pem [client-tls.crt client-tls.key]]
//
// With a TLS CA certificate, the client connects over TLS and checks the
// peer's certificate against it, as Fabric's samples do; without, in
// plaintext. With a client TLS certificate and key too, it presents them
// (mutual TLS) and names the certificate's hash, as Fabric's clients do.
// Prints one JSON object with what the client saw; exits non-zero on any
// error. tests/peer.rs runs it against `weft peer start`.
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const { connect, signers } = require('@hyperledger/fabric-gateway');

async function main() {
    const [address, mspId, certPath, keyPath, channelName, tlsCaPath, tlsCertPath, tlsKeyPath] =
        process.argv.slice(2);
    const clientTls = tlsCertPath
        ? { cert: fs.readFileSync(tlsCertPath), key: fs.readFileSync(tlsKeyPath) }
        : undefined;
    const credentials = tlsCaPath
        ? grpc.credentials.createSsl(fs.readFileSync(tlsCaPath), clientTls?.key, clientTls?.cert)
        : grpc.credentials.createInsecure();
    const client = new grpc.Client(address, credentials);
    const gateway = connect({
        client,
        tlsClientCertificateHash: clientTls
            ? crypto.createHash('sha256').update(new crypto.X509Certificate(clientTls.cert).raw).digest()
            : undefined,
        identity: { mspId, credentials: fs.readFileSync(certPath) },
        signer: signers.newPrivateKeySigner(crypto.createPrivateKey(fs.readFileSync(keyPath))),
        evaluateOptions: () => ({ deadline: Date.now() + 10000 }),
        endorseOptions: () => ({ deadline: Date.now() + 20000 }),
        submitOptions: () => ({ deadline: Date.now() + 10000 }),
        commitStatusOptions: () => ({ deadline: Date.now() + 60000 }),
    });
    const seen = {};
    try {
        const network = gateway.getNetwork(channelName);
        const contract = network.getContract('kv');
        const key = `gateway-${process.pid}`;

        const events = await network.getChaincodeEvents('kv');
        try {
            await contract.submitTransaction('put', key, 'from the Fabric gateway client');
            seen.value = Buffer.from(await contract.evaluateTransaction('get', key)).toString();

            const submitted = await contract.submitAsync('put', { arguments: [`${key}-2`, 'second'] });
            const status = await submitted.getStatus();
            seen.status = {
                successful: status.successful,
                code: status.code,
                blockNumber: Number(status.blockNumber),
                transactionId: status.transactionId === submitted.getTransactionId(),
            };

            seen.events = [];
            for await (const event of events) {
                seen.events.push({
                    name: event.eventName,
                    payload: Buffer.from(event.payload).toString(),
                    chaincode: event.chaincodeName,
                });
                if (seen.events.length === 2) {
                    break;
                }
            }
        } finally {
            events.close();
        }

        try {
            await contract.evaluateTransaction('get', `${key}-absent`);
            seen.missing = 'no error';
        } catch (error) {
            seen.missing = error.message;
        }
        seen.key = key;
    } finally {
        gateway.close();
        client.close();
    }
    console.log(JSON.stringify(seen));
}

main().catch((error) => {
    console.error(error);
    process.exit(1);
});
