// Drives the `assets` contract (tests/js/assets, written with Fabric's
// contract API) through Fabric's own Gateway client, as an application
// would: assets indexed under composite keys, queried by partial
// composite key and by range, whole and a page at a time, and guarded
// by key-level endorsement policies.
//
//   node assets.js <peer host:port> <mspId> <cert.pem> <key.pem> <channel>
//
// The connection is gateway-client.js's. Prints one JSON object with what
// the client saw; exits non-zero on an unexpected error. tests/peer.rs
// runs it against weft's peers.
'use strict';

const { runGatewayClient } = require('./gateway-client');

runGatewayClient(async (gateway, channelName) => {
    const text = (bytes) => Buffer.from(bytes).toString();
    const seen = {};
    const contract = gateway.getNetwork(channelName).getContract('assets');
    const evaluate = async (name, ...args) => JSON.parse(text(await contract.evaluateTransaction(name, ...args)));
    for (const [id, color] of [['a1', 'blue'], ['a2', 'red'], ['a3', 'blue'], ['a4', 'green'], ['a5', 'blue']]) {
        await contract.submitTransaction('createAsset', id, color, '10', 'alice');
    }
    seen.read = JSON.parse(text(await contract.evaluateTransaction('readAsset', 'a2')));
    seen.blue = await evaluate('assetsByColor', 'blue');
    seen.index = await evaluate('indexEntries');
    seen.simpleKeys = await evaluate('keysInRange', '', '');
    seen.bluePages = [];
    let bookmark = '';
    do {
        const page = await evaluate('assetsByColorPaged', 'blue', '2', bookmark);
        seen.bluePages.push(page);
        bookmark = page.bookmark;
    } while (bookmark !== '' && seen.bluePages.length < 10);
    seen.rangePages = [];
    bookmark = '';
    do {
        const page = await evaluate('keysInRangePaged', 'a2', '', '2', bookmark);
        seen.rangePages.push(page);
        bookmark = page.bookmark;
    } while (bookmark !== '' && seen.rangePages.length < 10);

    const deleted = await contract.submitAsync('deleteAsset', { arguments: ['a3'] });
    await deleted.getStatus();
    seen.blueAfterDelete = await evaluate('assetsByColor', 'blue');

    // Two resizes of a1, then its history, newest first, by TxID.
    seen.resizes = [];
    for (const size of ['20', '30']) {
        const submitted = await contract.submitAsync('resizeAsset', { arguments: ['a1', size] });
        const status = await submitted.getStatus();
        seen.resizes.push({ txId: submitted.getTransactionId(), valid: status.successful });
    }
    seen.a1History = await evaluate('assetHistory', 'a1');
    seen.query = await evaluate('assetsByQuery', JSON.stringify({
        selector: { owner: 'alice', size: { $gte: 10 } },
        sort: [{ size: 'desc' }],
        fields: ['id', 'size'],
    }));
    seen.queryPages = [];
    bookmark = '';
    for (;;) {
        const page = await evaluate('assetsByQueryPaged', JSON.stringify({ selector: { owner: 'alice' } }), '2', bookmark);
        seen.queryPages.push(page.keys);
        bookmark = page.bookmark;
        if (page.fetched < 2 || seen.queryPages.length >= 10) {
            break;
        }
    }
    seen.a3History = await evaluate('assetHistory', 'a3');
    seen.a3Deleted = deleted.getTransactionId();

    try {
        await contract.submitTransaction('resizeAfterPage', 'a1', '40');
        seen.writeAfterPage = 'submitted';
    } catch (err) {
        seen.writeAfterPage = {
            code: err.code,
            message: err.message,
            details: (err.details || []).map(({ address, mspId, message }) => ({ address, mspId, message })),
        };
    }
    seen.a1 = JSON.parse(text(await contract.evaluateTransaction('readAsset', 'a1')));

    // Key-level endorsement: a1 guarded by Org2's peers alone, then
    // resized with the endorsement of Org1 only, then of Org2 only.
    await contract.submitTransaction('guardAsset', 'a1', 'Org2MSP');
    seen.guards = await evaluate('assetGuards', 'a1');
    seen.guarded = [];
    for (const [orgs, size] of [[['Org1MSP'], '50'], [['Org2MSP'], '60']]) {
        const submitted = await contract.submitAsync('resizeAsset', { arguments: ['a1', size], endorsingOrganizations: orgs });
        const status = await submitted.getStatus();
        seen.guarded.push({ orgs, code: status.code, valid: status.successful });
    }
    seen.a1Guarded = JSON.parse(text(await contract.evaluateTransaction('readAsset', 'a1')));

    // One transaction writes through a call to the `mirror` chaincode:
    // the asset is in both namespaces; a call to a chaincode that does
    // not exist fails the transaction.
    const mirror = gateway.getNetwork(channelName).getContract('mirror');
    seen.called = JSON.parse(text(await contract.submitTransaction('createAssetWith', 'mirror', 'm1', 'black', '5', 'bob')));
    seen.mirrored = JSON.parse(text(await mirror.evaluateTransaction('readAsset', 'm1')));
    seen.here = JSON.parse(text(await contract.evaluateTransaction('readAsset', 'm1')));
    try {
        await contract.submitTransaction('createAssetWith', 'nowhere', 'm2', 'black', '5', 'bob');
        seen.callNowhere = 'submitted';
    } catch (err) {
        seen.callNowhere = (err.details || []).map((detail) => detail.message).join('; ');
    }
    return seen;
});
