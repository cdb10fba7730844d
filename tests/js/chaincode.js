// A chaincode written with Fabric's own Node.js shim (fabric-shim), run as
// chaincode-as-a-service: it serves protos.Chaincode/Connect and the peer
// dials it. weft's tests invoke it end to end.
//
//   node chaincode.js <listen host:port> <package id> [<cert.pem> <key.pem> [<client-ca.pem>]]
//
// Functions: put <key> <value> (sets event "put" with the key as payload),
// get <key>, del <key>, range <start> <end> (JSON list of {key, value}),
// history <key> (JSON list of {txId, isDelete}, newest first), rich
// <selector> (a JSON query),
// fail <message> (an error response), exit (the process ends mid-call).

'use strict';

const shim = require('fabric-shim');

class Notes {
    // Runs for a proposal marked is_init (an INIT message from the peer).
    async Init(stub) {
        const {fcn} = stub.getFunctionAndParameters();
        return shim.success(Buffer.from(`initialised by ${fcn}`));
    }

    async Invoke(stub) {
        const {fcn, params} = stub.getFunctionAndParameters();
        switch (fcn) {
        case 'put':
            await stub.putState(params[0], Buffer.from(params[1]));
            stub.setEvent('put', Buffer.from(params[0]));
            return shim.success(Buffer.from(stub.getTxID()));
        case 'get': {
            const value = await stub.getState(params[0]);
            if (!value || value.length === 0) {
                return shim.error(`note ${params[0]} not found`);
            }
            return shim.success(value);
        }
        case 'del':
            await stub.deleteState(params[0]);
            return shim.success();
        case 'range': {
            const found = [];
            for await (const {key, value} of stub.getStateByRange(params[0], params[1])) {
                found.push({key, value: Buffer.from(value).toString()});
            }
            return shim.success(Buffer.from(JSON.stringify(found)));
        }
        case 'history': {
            const found = [];
            for await (const {txId, isDelete} of stub.getHistoryForKey(params[0])) {
                found.push({txId, isDelete});
            }
            return shim.success(Buffer.from(JSON.stringify(found)));
        }
        case 'rich':
            try {
                const keys = [];
                for await (const {key} of stub.getQueryResult(params[0])) {
                    keys.push(key);
                }
                return shim.success(Buffer.from(JSON.stringify(keys)));
            } catch (err) {
                return shim.error(`rich query: ${err.message}`);
            }
        case 'fail':
            return shim.error(params[0]);
        case 'exit':
            process.exit(3);
            break;
        default:
            return shim.error(`unknown function ${fcn}`);
        }
    }
}

// With a certificate and key (PEM files) it serves TLS; with a client CA
// certificate too it requires clients to present a certificate it issued.
const [address, ccid, certFile, keyFile, clientCaFile] = process.argv.slice(2);
const fs = require('fs');
const tlsProps = certFile ? {
    cert: fs.readFileSync(certFile),
    key: fs.readFileSync(keyFile),
    clientCACerts: clientCaFile ? fs.readFileSync(clientCaFile) : undefined,
} : undefined;
shim.server(new Notes(), {ccid, address, tlsProps})
    .start()
    .then(() => console.log(`chaincode listening on ${address}`))
    .catch((err) => {
        console.error(`chaincode failed to start: ${err}`);
        process.exit(1);
    });
