// Drives the `secrets` contract (tests/js/secrets, private data written
// with Fabric's contract API) through Fabric's own Gateway client, as an
// application of one organisation would. SECRETS_AS says which part:
//
//   SECRETS_AS=creator  creates assets with transient data, reads them
//                       back, deletes one (Org1's user, at Org1's peer)
//   SECRETS_AS=other    reads what the creator's organisation wrote from
//                       another organisation's peer, and writes to a
//                       collection pushed to no one (Org2's user)
//   SECRETS_AS=expired  reads the appraisal again once its blockToLive
//                       has passed, and what Org2's user wrote (Org1's
//                       user, at Org1's peer)
//   SECRETS_AS=guarded  puts a key-level endorsement policy on Org2's
//                       user's note, writes it endorsed by one
//                       organisation and by both, then purges it (Org1's
//                       user, at Org1's peer, naming the endorsers)
//   SECRETS_AS=read     reads the note SECRETS_KEY (default p1) and its
//                       hash and policy (any user, at any peer)
//   SECRETS_AS=protected
//                       writes notes with transient data to the contract
//                       SECRETS_CONTRACT, whose policy needs both
//                       organisations, naming no endorsers and then both
//                       (Org1's user, at Org1's peer)
//
//   node secrets.js <peer host:port> <mspId> <cert.pem> <key.pem> <channel>
//
// The connection is gateway-client.js's. Prints one JSON object with what
// the client saw; tests/peer.rs runs it against weft's peers.
'use strict';

const { runGatewayClient } = require('./gateway-client');

// The outcome of `call`: its result as text, or the error's details.
async function outcome(call) {
    try {
        return { ok: Buffer.from(await call()).toString() };
    } catch (err) {
        const details = (err.details || []).map((detail) => detail.message);
        return { error: details.length > 0 ? details.join('; ') : err.message };
    }
}

runGatewayClient(async (gateway, channelName) => {
    const contract = gateway.getNetwork(channelName).getContract('secrets');
    const evaluate = (name, ...args) => outcome(() => contract.evaluateTransaction(name, ...args));
    const seen = {};
    if (process.env.SECRETS_AS === 'creator') {
        for (const [id, color, appraisedValue] of [['s1', 'yellow', 300], ['s2', 'red', 400]]) {
            const properties = JSON.stringify({ id, color, size: 5, appraisedValue });
            const submitted = await contract.submitAsync('createAsset', {
                transientData: { asset_properties: properties },
                endorsingOrganizations: ['Org1MSP'],
            });
            const status = await submitted.getStatus();
            seen[`created_${id}`] = { code: status.code, valid: status.successful, block: Number(status.blockNumber) };
        }
        seen.asset = await evaluate('readAsset', 's1');
        seen.appraisal = await evaluate('readFrom', 'Org1MSPPrivateCollection', 's1');
        seen.verified = await evaluate('verify', 'assetCollection', 's1', seen.asset.ok || '');
        seen.ids = await evaluate('assetIds', '', '');
        seen.query = await evaluate('assetsByQuery', JSON.stringify({
            selector: { owner: 'Org1MSP', color: { $in: ['red', 'green'] } },
            fields: ['id', 'color'],
        }));
        seen.byColor = await evaluate('assetsByQuery', JSON.stringify({
            selector: { color: { $gt: '' } },
            fields: ['id'],
        }));
        const deleted = await contract.submitAsync('deleteAsset', { arguments: ['s2'] });
        seen.deleted = (await deleted.getStatus()).successful;
        seen.afterDelete = await evaluate('readAsset', 's2');
        seen.idsAfterDelete = await evaluate('assetIds', '', '');
        seen.undeclared = await evaluate('readFrom', 'nope', 's1');
        seen.undeclaredHash = await evaluate('hashOf', 'nope', 's1');
        await contract.submitTransaction('writeTo', 'org1Notes', 'n1', 'for org1 only');
        seen.note = await evaluate('readFrom', 'org1Notes', 'n1');
        seen.appraisalHash = await evaluate('hashOf', 'Org1MSPPrivateCollection', 's1');
    } else if (process.env.SECRETS_AS === 'guarded') {
        // The commit status of `name(...args)` endorsed by `orgs`: its
        // code and block.
        const submit = async (name, args, orgs) => {
            const submitted = await contract.submitAsync(name, {
                arguments: args,
                endorsingOrganizations: orgs,
            });
            const status = await submitted.getStatus();
            return { code: status.code, block: Number(status.blockNumber) };
        };
        // Org2's user's note, in a collection of both organisations
        // pushed to no one: each endorsing peer keeps its own copy.
        const note = ['pulledCollection', 'p1'];
        const both = ['Org1MSP', 'Org2MSP'];
        seen.guard = await submit('guard', [...note, both.join(',')], both);
        seen.guardOf = await evaluate('guardOf', ...note);
        seen.writtenByOne = await submit('writeTo', [...note, 'by one'], ['Org1MSP']);
        seen.writtenByBoth = await submit('writeTo', [...note, 'by both'], both);
        seen.note = await evaluate('readFrom', ...note);
        seen.purgedByOne = await submit('purge', note, ['Org1MSP']);
        seen.purgedByBoth = await submit('purge', note, both);
    } else if (process.env.SECRETS_AS === 'protected') {
        const both = gateway.getNetwork(channelName).getContract(process.env.SECRETS_CONTRACT);
        // The commit status of a note written to `collection` with
        // transient data, endorsed by `orgs` (the Gateway's choice when
        // none), or the error.
        const write = async (collection, id, orgs) => {
            try {
                const submitted = await both.submitAsync('writeTo', {
                    arguments: [collection, id, 'secret'],
                    transientData: { secret: 'kept from non-members' },
                    endorsingOrganizations: orgs,
                });
                const status = await submitted.getStatus();
                return { valid: status.successful, block: Number(status.blockNumber) };
            } catch (err) {
                return { code: err.code, error: err.message };
            }
        };
        seen.org1Only = await write('org1Notes', 'x1');
        seen.shared = await write('pulledCollection', 'x2');
        seen.named = await write('org1Notes', 'x3', ['Org1MSP', 'Org2MSP']);
    } else if (process.env.SECRETS_AS === 'read') {
        const key = process.env.SECRETS_KEY || 'p1';
        seen.note = await evaluate('readFrom', 'pulledCollection', key);
        seen.hash = await evaluate('hashOf', 'pulledCollection', key);
        seen.guardOf = await evaluate('guardOf', 'pulledCollection', key);
    } else if (process.env.SECRETS_AS === 'expired') {
        seen.asset = await evaluate('readAsset', 's1');
        seen.appraisal = await evaluate('readFrom', 'Org1MSPPrivateCollection', 's1');
        seen.appraisalHash = await evaluate('hashOf', 'Org1MSPPrivateCollection', 's1');
        seen.pulled = await evaluate('readFrom', 'pulledCollection', 'p1');
    } else {
        seen.asset = await evaluate('readAsset', 's1');
        seen.appraisal = await evaluate('readFrom', 'Org1MSPPrivateCollection', 's1');
        seen.appraisalHash = await evaluate('hashOf', 'Org1MSPPrivateCollection', 's1');
        seen.note = await evaluate('readFrom', 'org1Notes', 'n1');
        seen.afterDelete = await evaluate('readAsset', 's2');
        // A collection pushed to no one: Org1's peer pulls it at commit.
        await contract.submitTransaction('writeTo', 'pulledCollection', 'p1', 'pulled at commit');
    }
    return seen;
});
