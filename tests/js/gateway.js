// Drives a weft peer with Fabric's own Gateway client library
// (@hyperledger/fabric-gateway), unchanged: submit, evaluate, commit
// status and chaincode events against the built-in `kv` chaincode.
//
//   node gateway.js <peer host:port> <mspId> <cert.pem> <key.pem> <channel> \
//       [tls-ca.pem [client-tls.crt client-tls.key]]
//
// The connection, over TLS or not, is gateway-client.js's. Prints one JSON
// object with what the client saw; exits non-zero on any error.
// tests/peer.rs runs it against `weft peer start`.
'use strict';

const { runGatewayClient } = require('./gateway-client');

runGatewayClient(async (gateway, channelName) => {
    const seen = {};
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
    return seen;
});
