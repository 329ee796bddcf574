/** The test RecordingBackend keeps the backend contract, in both lifetimes. */
import { describeBackendContract } from '../../helpers/backend-contract.js';
import { RecordingBackend } from '../../helpers/recording-backend.js';
import { recordingFixture, sharedStore } from '../../helpers/recording-contract-fixture.js';

const store = sharedStore();

describeBackendContract('recording backend', recordingFixture(RecordingBackend, 'orchestrator', store));
describeBackendContract(
  'recording backend (cluster lifetime)',
  recordingFixture(RecordingBackend, 'cluster', store),
);
