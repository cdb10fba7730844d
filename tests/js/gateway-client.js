// What the Gateway-client scripts (gateway.js, assets.js) share: reading
// the connection from the command line, connecting with Fabric's own
// Gateway client library (@hyperledger/fabric-gateway), and printing what
// the script saw as one JSON object.
//
//   node <script> <peer host:port> <mspId> <cert.pem> <key.pem> <channel> \
//       [tls-ca.pem [client-tls.crt client-tls.key]]
//
// With a TLS CA certificate, the client connects over TLS and checks the
// peer's certificate against it, as Fabric's samples do; without, in
// plaintext. With a client TLS certificate and key too, it presents them
// (mutual TLS) and names the certificate's hash, as Fabric's clients do.
'use strict';

const crypto = require('node:crypto');
const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const { connect, signers } = require('@hyperledger/fabric-gateway');

// Connects as the command line says, runs `drive(gateway, channelName)`,
// prints the object it returns as JSON and closes the connection; exits
// non-zero on any error.
function runGatewayClient(drive) {
    main(drive).catch((error) => {
        console.error(error);
        process.exit(1);
    });
}

async function main(drive) {
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
    let seen;
    try {
        seen = await drive(gateway, channelName);
    } finally {
        gateway.close();
        client.close();
    }
    console.log(JSON.stringify(seen));
}

module.exports = { runGatewayClient };
