package org.melon.yarn;

import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import com.sun.net.httpserver.Headers;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.authorize.AccessControlList;
import org.apache.hadoop.yarn.conf.YarnConfiguration;

/**
 * Who may read the AM's pages ({@code /status}, {@code /}, {@code /tensorboard/...}) when the RM web proxy names
 * the caller: Hadoop's WebAppProxyServlet forwards the user it knows in the cookie {@link #COOKIE} (its
 * {@code PROXY_USER_COOKIE_NAME}) and no other cookie of the caller's. Like the RM's own check of an
 * application's {@code VIEW_APP} ACL (ApplicationACLsManager): with {@code yarn.acl.enable} the application's
 * owner, the users and groups of its VIEW ACL ({@link #ENV}, set by the submitter; none: nobody else) and the YARN
 * admins ({@code yarn.admin.acl}) may; without it, everyone. Groups come from the cluster's group mapping (the AM's
 * Configuration, as on the RM).
 *
 * <p>A request without the cookie (the executors' registration and heartbeats, direct calls to the AM) is not
 * checked here: the proxy is the only caller that names a user.
 */
final class ViewAcl {

  /** org.apache.hadoop.yarn.server.webproxy.WebAppProxyServlet.PROXY_USER_COOKIE_NAME (ViewAclTest pins it). */
  static final String COOKIE = "proxy-user";
  /** The application's VIEW_APP ACL ({@code "users groups"}), in the AM's environment. */
  static final String ENV = "MELON_VIEW_ACL";

  private final String appId;
  private final String owner;
  private final AccessControlList view;
  private final AccessControlList admins;

  ViewAcl(String appId, String owner, String viewAcl, String adminAcl) {
    this.appId = appId;
    this.owner = owner;
    // no ACL: YarnConfiguration.DEFAULT_YARN_APP_ACL (" ", nobody), as the RM
    this.view = new AccessControlList(viewAcl == null || viewAcl.isEmpty() ? YarnConfiguration.DEFAULT_YARN_APP_ACL
        : viewAcl);
    this.admins = new AccessControlList(adminAcl == null ? YarnConfiguration.DEFAULT_YARN_ADMIN_ACL : adminAcl);
  }

  /** The AM's check: null (nothing checked) unless the cluster has {@code yarn.acl.enable}. */
  static ViewAcl fromEnvironment(String appId, String owner, Configuration conf) {
    if (!conf.getBoolean(YarnConfiguration.YARN_ACL_ENABLE, YarnConfiguration.DEFAULT_YARN_ACL_ENABLE)) {
      return null;
    }
    return new ViewAcl(appId, owner, System.getenv(ENV),
        conf.get(YarnConfiguration.YARN_ADMIN_ACL, YarnConfiguration.DEFAULT_YARN_ADMIN_ACL));
  }

  boolean allows(String user) {
    if (user.equals(owner)) {
      return true;
    }
    UserGroupInformation ugi = UserGroupInformation.createRemoteUser(user);
    return admins.isUserAllowed(ugi) || view.isUserAllowed(ugi);
  }

  /** 403 if the request names (in {@link #COOKIE}) a user who may not view this application. */
  void check(Headers headers) throws AmHttp.HttpError {
    for (String user : proxyUsers(headers)) {
      if (!allows(user)) {
        throw new AmHttp.HttpError(403, "user " + user + " may not view " + appId + " (owner " + owner
            + "): only its owner, its VIEW_APP ACL and the YARN admins may");
      }
    }
  }

  @Override
  public String toString() {
    return "owner " + owner + ", VIEW_APP [" + view.getAclString() + "], admins [" + admins.getAclString() + "]";
  }

  /** The users named by the request's {@link #COOKIE} cookies (URL-encoded by the proxy), empty ones left out. */
  static List<String> proxyUsers(Headers headers) {
    List<String> users = new ArrayList<>();
    for (String header : headers.getOrDefault("Cookie", List.of())) {
      for (String pair : header.split(";")) {
        int eq = pair.indexOf('=');
        if (eq > 0 && COOKIE.equals(pair.substring(0, eq).trim())) {
          String v = pair.substring(eq + 1).trim();
          if (v.length() >= 2 && v.startsWith("\"") && v.endsWith("\"")) {
            v = v.substring(1, v.length() - 1);
          }
          try {
            v = URLDecoder.decode(v, StandardCharsets.UTF_8);
          } catch (IllegalArgumentException e) {
            // not URL-encoded: take it as it is
          }
          if (!v.isEmpty()) {
            users.add(v);
          }
        }
      }
    }
    return users;
  }
}
