// A contract keeping assets in private data collections, written with
// Fabric's contract API the way Fabric's asset-transfer-private-data
// sample is: the asset's properties come in the proposal's transient
// data (never on the ledger), the asset goes to a collection both
// organisations share, and its appraisal to a collection of the
// creator's organisation alone. Served as chaincode-as-a-service by
// Fabric's own runner; tests/js/secrets.js drives it through Fabric's
// Gateway client.

'use strict';

const crypto = require('node:crypto');
const { Contract } = require('fabric-contract-api');
const { KeyEndorsementPolicy } = require('fabric-shim');

const SHARED = 'assetCollection';

class Secrets extends Contract {
    // Creates the asset the transient field `asset_properties` describes
    // ({id, color, size, appraisedValue}), owned by the caller's
    // organisation.
    async createAsset(ctx) {
        const properties = ctx.stub.getTransient().get('asset_properties');
        if (!properties) {
            throw new Error('asset_properties must be given in the transient data');
        }
        const { id, color, size, appraisedValue } = JSON.parse(Buffer.from(properties).toString());
        const existing = await ctx.stub.getPrivateData(SHARED, id);
        if (existing && existing.length > 0) {
            throw new Error(`asset ${id} already exists`);
        }
        const owner = ctx.clientIdentity.getMSPID();
        const asset = { id, color, size, owner };
        await ctx.stub.putPrivateData(SHARED, id, Buffer.from(JSON.stringify(asset)));
        await ctx.stub.putPrivateData(`${owner}PrivateCollection`, id,
            Buffer.from(JSON.stringify({ id, appraisedValue })));
    }

    async readAsset(ctx, id) {
        return this.readFrom(ctx, SHARED, id);
    }

    // The value of `id` in `collection`.
    async readFrom(ctx, collection, id) {
        const value = await ctx.stub.getPrivateData(collection, id);
        if (!value || value.length === 0) {
            throw new Error(`${id} does not exist in ${collection}`);
        }
        return Buffer.from(value).toString();
    }

    // Writes a note to `collection` (no checks of the contract's own).
    async writeTo(ctx, collection, id, note) {
        await ctx.stub.putPrivateData(collection, id, Buffer.from(note));
    }

    // The hash of `id` in `collection`, in hex: what every peer holds.
    async hashOf(ctx, collection, id) {
        return Buffer.from(await ctx.stub.getPrivateDataHash(collection, id)).toString('hex');
    }

    // Whether the hash every peer holds is that of `value`.
    async verify(ctx, collection, id, value) {
        const hash = Buffer.from(await ctx.stub.getPrivateDataHash(collection, id)).toString('hex');
        return String(hash === crypto.createHash('sha256').update(value).digest('hex'));
    }

    // Makes writes of `id` in `collection` need endorsements by a member
    // of each of `orgs` (comma-separated MSP IDs): a key-level
    // endorsement policy on private data.
    async guard(ctx, collection, id, orgs) {
        const policy = new KeyEndorsementPolicy();
        policy.addOrgs('MEMBER', ...orgs.split(','));
        await ctx.stub.setPrivateDataValidationParameter(collection, id, policy.getPolicy());
    }

    // The organisations the key-level policy of `id` in `collection` names.
    async guardOf(ctx, collection, id) {
        const policy = await ctx.stub.getPrivateDataValidationParameter(collection, id);
        const orgs = policy && policy.length > 0 ? new KeyEndorsementPolicy(policy).listOrgs() : [];
        return JSON.stringify(orgs.sort());
    }

    // Purges `id` from `collection`: its value and every earlier one leave
    // the members' private data.
    async purge(ctx, collection, id) {
        await ctx.stub.purgePrivateData(collection, id);
    }

    async deleteAsset(ctx, id) {
        const asset = JSON.parse(await this.readAsset(ctx, id));
        await ctx.stub.deletePrivateData(SHARED, id);
        await ctx.stub.deletePrivateData(`${asset.owner}PrivateCollection`, id);
    }

    // The shared assets a CouchDB (Mango) JSON query selects.
    async assetsByQuery(ctx, query) {
        const found = [];
        for await (const { key, value } of ctx.stub.getPrivateDataQueryResult(SHARED, query)) {
            found.push({ key, value: JSON.parse(Buffer.from(value).toString()) });
        }
        return JSON.stringify(found);
    }

    // The IDs of the shared assets in [start, end).
    async assetIds(ctx, start, end) {
        const ids = [];
        for await (const { key } of ctx.stub.getPrivateDataByRange(SHARED, start, end)) {
            ids.push(key);
        }
        return JSON.stringify(ids);
    }
}

module.exports.contracts = [Secrets];
