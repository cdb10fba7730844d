// Caliper workload: the smallbank chaincode. With `create: true` each
// transaction opens a customer's checking and savings accounts; otherwise
// transaction n runs one of smallbank's operations on customer n (or
// customers n and n+1 for a payment), so that no two transactions of a
// round touch the same account and every one must commit.
'use strict';

const {WorkloadModuleBase} = require('@hyperledger/caliper-core');

const OPERATIONS = [
    (id) => ['deposit_checking', [id, '10']],
    (id) => ['transact_savings', [id, '5']],
    (id) => ['write_check', [id, '3']],
    (id) => ['query', [id]],
];

class SmallBank extends WorkloadModuleBase {
    constructor() {
        super();
        this.sent = 0;
    }

    async submitTransaction() {
        const customer = `customer-${this.workerIndex}-${this.sent}`;
        const [contractFunction, contractArguments] = this.roundArguments.create
            ? ['create_account', [customer, '1000', '1000']]
            : OPERATIONS[this.sent % OPERATIONS.length](customer);
        this.sent += 1;
        await this.sutAdapter.sendRequests({
            contractId: 'smallbank',
            channel: this.roundArguments.channel,
            contractFunction,
            contractArguments,
            readOnly: contractFunction === 'query',
        });
    }
}

module.exports.createWorkloadModule = () => new SmallBank();
