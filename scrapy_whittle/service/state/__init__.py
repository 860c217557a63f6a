"""What the service keeps of a crawl and how: the storage interface (:mod:`.storage`), the
SQLite store (:mod:`.store`) and the policy's state codec, the incremental checkpoints and the
restore (:mod:`.persistence`), the delivery journal beside the state, the publication times
waiting for the next checkpoint, and the garbage collector kept out of bulk loads."""
