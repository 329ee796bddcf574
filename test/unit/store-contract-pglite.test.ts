import { freshStore } from '../helpers/data-dir.js';
import { describeStoreContract } from '../helpers/store-contract.js';

describeStoreContract('PGlite', freshStore);
