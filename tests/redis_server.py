from collector.localredis import RedisServer, free_port

__all__ = ["RedisServer", "free_port"]
