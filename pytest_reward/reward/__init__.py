"""The authoring API, which runs without pytest: the result models (:mod:`.models`), the decorator
(:mod:`.decorator`) and its spec (:mod:`.spec`), the one calling convention (:mod:`.call`) and conversations
(:mod:`.chat`)."""
