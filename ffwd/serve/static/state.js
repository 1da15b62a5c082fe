// What the page remembers between events: the conversation so far, the last request and
// its result (for compare), the running request's abort handle, and whether the server
// wants an API key it does not have.
export const state = { history: [], lastBody: null, lastRun: null, abort: null, keyNeeded: false };
