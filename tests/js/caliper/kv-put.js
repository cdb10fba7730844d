// Caliper workload: `kv put` of a fresh key per transaction.
'use strict';

const {WorkloadModuleBase} = require('@hyperledger/caliper-core');

class KvPut extends WorkloadModuleBase {
    constructor() {
        super();
        this.sent = 0;
    }

    async submitTransaction() {
        this.sent += 1;
        await this.sutAdapter.sendRequests({
            contractId: 'kv',
            channel: this.roundArguments.channel,
            contractFunction: 'put',
            contractArguments: [`caliper-${this.workerIndex}-${this.sent}`, 'value'],
            readOnly: false,
        });
    }
}

module.exports.createWorkloadModule = () => new KvPut();
