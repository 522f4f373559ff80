# The compiled hot path is acp_fast/roles/_hot_py.py compiled unchanged (with _hot_c.pxd):
# its types are the pure source's.
from acp_fast.roles._hot_py import Context as Context
from acp_fast.roles._hot_py import NotificationHandler as NotificationHandler
from acp_fast.roles._hot_py import ProxyContext as ProxyContext
from acp_fast.roles._hot_py import RequestHandler as RequestHandler
from acp_fast.roles._hot_py import SessionUpdate as SessionUpdate
from acp_fast.roles._hot_py import UpdateDispatcher as UpdateDispatcher
from acp_fast.roles._hot_py import Sender as Sender

__all__ = ["Context", "NotificationHandler", "ProxyContext", "RequestHandler", "SessionUpdate", "UpdateDispatcher", "Sender"]
