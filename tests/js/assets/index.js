// A contract written with Fabric's contract API (fabric-contract-api),
// the way Fabric's own samples index assets: each asset is a JSON value
// under its ID, plus an index entry under the composite key
// color~name(color, id). Served as chaincode-as-a-service by Fabric's
// own runner:
//
//   node node_modules/fabric-shim/cli.js server \
//       --chaincode-address <host:port> --chaincode-id <package id> \
//       --module-path assets
//
// tests/js/assets.js drives it through Fabric's Gateway client.

'use strict';

const { Contract } = require('fabric-contract-api');
const { KeyEndorsementPolicy } = require('fabric-shim');

const COLOR_INDEX = 'color~name';

// One page of a paged query, as the contract answers it: what `pick`
// takes of each result, under `field`, with the page's count and
// bookmark; the iterator closed.
async function page({ iterator, metadata }, field, pick) {
    const found = [];
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) {
        found.push(pick(next.value));
    }
    await iterator.close();
    return JSON.stringify({ [field]: found, fetched: metadata.fetchedRecordsCount, bookmark: metadata.bookmark });
}

class Assets extends Contract {
    async createAsset(ctx, id, color, size, owner) {
        const existing = await ctx.stub.getState(id);
        if (existing && existing.length > 0) {
            throw new Error(`asset ${id} already exists`);
        }
        const asset = { id, color, size: Number(size), owner };
        await ctx.stub.putState(id, Buffer.from(JSON.stringify(asset)));
        await ctx.stub.putState(ctx.stub.createCompositeKey(COLOR_INDEX, [color, id]), Buffer.from([0]));
        return JSON.stringify(asset);
    }

    // Creates the asset here and, in the same transaction, in the
    // chaincode `other` (chaincode-to-chaincode call on this channel).
    async createAssetWith(ctx, other, id, color, size, owner) {
        await this.createAsset(ctx, id, color, size, owner);
        const response = await ctx.stub.invokeChaincode(other, ['createAsset', id, color, size, owner], '');
        if (response.status !== 200) {
            throw new Error(`${other} answered ${response.status}: ${response.message}`);
        }
        return Buffer.from(response.payload).toString();
    }

    async readAsset(ctx, id) {
        const value = await ctx.stub.getState(id);
        if (!value || value.length === 0) {
            throw new Error(`asset ${id} does not exist`);
        }
        return value.toString();
    }

    async deleteAsset(ctx, id) {
        const asset = JSON.parse(await this.readAsset(ctx, id));
        await ctx.stub.deleteState(id);
        await ctx.stub.deleteState(ctx.stub.createCompositeKey(COLOR_INDEX, [asset.color, id]));
    }

    // The IDs of the assets of one color, through the index.
    async assetsByColor(ctx, color) {
        const ids = [];
        for await (const { key } of ctx.stub.getStateByPartialCompositeKey(COLOR_INDEX, [color])) {
            ids.push(ctx.stub.splitCompositeKey(key).attributes[1]);
        }
        return JSON.stringify(ids);
    }

    // One page of them.
    async assetsByColorPaged(ctx, color, pageSize, bookmark) {
        const paged = await ctx.stub.getStateByPartialCompositeKeyWithPagination(
            COLOR_INDEX, [color], Number(pageSize), bookmark);
        return page(paged, 'ids', ({ key }) => ctx.stub.splitCompositeKey(key).attributes[1]);
    }

    // Every index entry, split back into its parts.
    async indexEntries(ctx) {
        const entries = [];
        for await (const { key } of ctx.stub.getStateByPartialCompositeKey(COLOR_INDEX, [])) {
            entries.push(ctx.stub.splitCompositeKey(key));
        }
        return JSON.stringify(entries);
    }

    // The keys of a simple-key range: never an index entry.
    async keysInRange(ctx, start, end) {
        const keys = [];
        for await (const { key } of ctx.stub.getStateByRange(start, end)) {
            keys.push(key);
        }
        return JSON.stringify(keys);
    }

    async keysInRangePaged(ctx, start, end, pageSize, bookmark) {
        const paged = await ctx.stub.getStateByRangeWithPagination(start, end, Number(pageSize), bookmark);
        return page(paged, 'keys', ({ key }) => key);
    }

    async resizeAsset(ctx, id, size) {
        const asset = JSON.parse(await this.readAsset(ctx, id));
        asset.size = Number(size);
        await ctx.stub.putState(id, Buffer.from(JSON.stringify(asset)));
    }

    // Every committed write of an asset, newest first.
    async assetHistory(ctx, id) {
        const history = [];
        for await (const modification of ctx.stub.getHistoryForKey(id)) {
            history.push({
                txId: modification.txId,
                isDelete: modification.isDelete,
                value: modification.isDelete ? null : JSON.parse(Buffer.from(modification.value).toString()),
                seconds: Number(modification.timestamp.seconds),
            });
        }
        return JSON.stringify(history);
    }

    // The assets a CouchDB (Mango) JSON query selects.
    async assetsByQuery(ctx, query) {
        const found = [];
        for await (const { key, value } of ctx.stub.getQueryResult(query)) {
            found.push({ key, value: JSON.parse(Buffer.from(value).toString()) });
        }
        return JSON.stringify(found);
    }

    async assetsByQueryPaged(ctx, query, pageSize, bookmark) {
        const paged = await ctx.stub.getQueryResultWithPagination(query, Number(pageSize), bookmark);
        return page(paged, 'keys', ({ key }) => key);
    }

    // Key-level endorsement (state-based): from now on the asset changes
    // only with the endorsement of a peer of each of `mspIds`
    // (comma-separated), whatever the chaincode's policy.
    async guardAsset(ctx, id, mspIds) {
        await this.readAsset(ctx, id);
        const policy = new KeyEndorsementPolicy();
        policy.addOrgs('PEER', ...mspIds.split(','));
        await ctx.stub.setStateValidationParameter(id, policy.getPolicy());
    }

    // The organisations whose peers must endorse a change of the asset.
    async assetGuards(ctx, id) {
        const policy = await ctx.stub.getStateValidationParameter(id);
        const orgs = policy && policy.length > 0 ? new KeyEndorsementPolicy(policy).listOrgs() : [];
        return JSON.stringify(orgs);
    }

    // Pages are for read-only transactions: the write after one fails.
    async resizeAfterPage(ctx, id, size) {
        const { iterator } = await ctx.stub.getStateByRangeWithPagination('', '', 1, '');
        await iterator.close();
        await this.resizeAsset(ctx, id, size);
    }
}

module.exports.contracts = [Assets];
